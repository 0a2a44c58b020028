"""Zeus's ``zeus.optimizer``: the power-limit and pipeline-frequency optimizers."""
