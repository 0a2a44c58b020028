#pragma once
// One computation on a thread of its own, its result taken on the thread that started it: what
// keeps planning and plan choices off the server's round path (the other jobs' rounds, and this
// job's at its current clocks, go on meanwhile).
#include <chrono>
#include <functional>
#include <future>
#include <stdexcept>
#include <thread>
#include <utility>

namespace perseus::online {

template <class T>
class BackgroundTask {
 public:
  BackgroundTask() = default;
  ~BackgroundTask() {
    if (thread_.joinable()) thread_.join();
  }
  BackgroundTask(const BackgroundTask&) = delete;
  BackgroundTask& operator=(const BackgroundTask&) = delete;

  // Runs `work` on a new thread; `done` is called there once its result (or exception) is ready.
  void start(
      std::function<T()> work, std::function<void()> done = [] {}) {
    if (thread_.joinable()) throw std::logic_error("the background task is already running");
    std::promise<T> promise;
    result_ = promise.get_future();
    thread_ = std::thread([work = std::move(work), promise = std::move(promise), done = std::move(done)]() mutable {
      try {
        promise.set_value(work());
      } catch (...) {
        promise.set_exception(std::current_exception());
      }
      done();
    });
  }
  // Started and not taken yet.
  bool pending() const { return result_.valid(); }
  bool ready() const { return pending() && result_.wait_for(std::chrono::seconds(0)) == std::future_status::ready; }
  // The result (blocking until ready); rethrows the work's exception.
  T take() {
    thread_.join();
    return result_.get();
  }

 private:
  std::future<T> result_;
  std::thread thread_;
};

}  // namespace perseus::online
