"""A stand-in for transformers: TrainerCallback's hooks with Hugging Face's signatures, and a Trainer
that calls them as Trainer.train does (epoch begin, per step begin and end, epoch end)."""
import time


class TrainerCallback:
    def on_train_begin(self, args, state, control, **kwargs): pass
    def on_train_end(self, args, state, control, **kwargs): pass
    def on_epoch_begin(self, args, state, control, **kwargs): pass
    def on_epoch_end(self, args, state, control, **kwargs): pass
    def on_step_begin(self, args, state, control, **kwargs): pass
    def on_step_end(self, args, state, control, **kwargs): pass


class Trainer:
    def __init__(self, model=None, args=None, train_dataset=None, callbacks=None):
        self.model, self.args, self.callbacks = model, args, list(callbacks or [])
        self.train_dataset = train_dataset

    def call(self, hook, **kwargs):
        for callback in self.callbacks:
            getattr(callback, hook)(self.args, "state", "control", model=self.model, **kwargs)

    def train(self):
        self.call("on_train_begin")
        for epoch in range(self.args["epochs"]):
            self.call("on_epoch_begin")
            for step in self.train_dataset:
                self.call("on_step_begin")
                time.sleep(0.0002)
                self.call("on_step_end")
            self.call("on_epoch_end")
        self.call("on_train_end")
        print("callbacks:", [type(c).__mro__[1].__module__ + "." + type(c).__mro__[1].__name__ for c in self.callbacks])
        print("state:", self.callbacks[0].optimizer.state)
