#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "perseus/util/task_thread.hpp"

using namespace perseus;

// The planner hands a task over once per frontier point (hundreds of thousands of times): each
// finish() must return only after that task's effects, and never miss or repeat a task.
TEST(TaskThread, EveryPostedTaskRunsOnceAndWaitSeesItsEffects) {
  TaskThread thread;
  long counter = 0;
  const std::function<void()> task = [&] { ++counter; };
  for (long i = 1; i <= 20000; ++i) {
    thread.post(task);
    thread.finish();
    ASSERT_EQ(counter, i);
  }
}

// The poster works while the task runs; both sides' writes are visible after finish().
TEST(TaskThread, RunsBesideThePosterAndWaitsForIt) {
  TaskThread thread;
  std::vector<int> left(1000), right(1000);
  const std::function<void()> task = [&] {
    for (std::size_t i = 0; i < right.size(); ++i) right[i] += static_cast<int>(i);
  };
  for (int round = 1; round <= 200; ++round) {
    thread.post(task);
    for (std::size_t i = 0; i < left.size(); ++i) left[i] += static_cast<int>(i);
    thread.finish();
  }
  for (std::size_t i = 0; i < left.size(); ++i) ASSERT_EQ(right[i], left[i]);
  EXPECT_EQ(right[999], 200 * 999);
}

TEST(TaskThread, FinishRethrowsWhatTheTaskThrewAndTheThreadGoesOn) {
  TaskThread thread;
  const std::function<void()> failing = [] { throw std::runtime_error("task failed"); };
  thread.post(failing);
  EXPECT_THROW(thread.finish(), std::runtime_error);
  int ran = 0;
  const std::function<void()> fine = [&] { ++ran; };
  thread.post(fine);
  thread.finish();
  EXPECT_EQ(ran, 1);
}

// A thread asleep after its spin (nothing posted for a while) still takes the next task.
TEST(TaskThread, WakesUpForATaskAfterSleeping) {
  TaskThread thread;
  int ran = 0;
  const std::function<void()> task = [&] { ++ran; };
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  thread.post(task);
  thread.finish();
  EXPECT_EQ(ran, 1);
}

// A task the poster has not reached by the time the thread is free runs on the thread.
TEST(TaskThread, TheSecondThreadTakesATaskThePosterLeaves) {
  TaskThread thread;
  std::thread::id ran_on;
  const std::function<void()> task = [&] { ran_on = std::this_thread::get_id(); };
  thread.post(task);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  thread.finish();
  EXPECT_NE(ran_on, std::this_thread::get_id());
  EXPECT_NE(ran_on, std::thread::id());
}
