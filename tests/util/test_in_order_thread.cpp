#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "perseus/util/in_order_thread.hpp"

using namespace perseus;

// The planner publishes an item per frontier point (hundreds of thousands) and reads each one's
// results a few points later: every item runs once, in order, and catch_up() returns only after
// the items' effects, whether the thread or the caller ran them.
TEST(InOrderThread, EveryItemRunsOnceInOrderAndCatchUpSeesItsEffects) {
  for (const bool second_thread : {true, false}) {
    SCOPED_TRACE(second_thread ? "with a thread" : "without");
    std::vector<std::size_t> ran;
    std::vector<long> results(20000, 0);
    InOrderThread worker(
        [&](std::size_t k) {
          ran.push_back(k);
          results[k] = static_cast<long>(k) * 3;
          return true;
        },
        second_thread);
    for (std::size_t k = 0; k < results.size(); ++k) {
      worker.publish(k + 1);
      if (k % 7 == 6 || k + 1 == results.size()) {  // a few items behind, as the planner
        const std::size_t wanted = k - 2;
        worker.catch_up(wanted + 1);
        ASSERT_GE(worker.done(), wanted + 1);
        ASSERT_EQ(results[wanted], static_cast<long>(wanted) * 3);
      }
    }
    worker.catch_up(results.size());
    ASSERT_EQ(ran.size(), results.size());
    for (std::size_t k = 0; k < ran.size(); ++k) ASSERT_EQ(ran[k], k);
  }
}

// What the publisher wrote for an item before publishing it is what the item sees.
TEST(InOrderThread, AnItemSeesWhatWasWrittenBeforeItWasPublished) {
  std::vector<int> input(4096, 0), output(4096, -1);
  InOrderThread worker([&](std::size_t k) {
    output[k] = input[k];
    return true;
  });
  for (std::size_t k = 0; k < input.size(); ++k) {
    input[k] = static_cast<int>(k) + 1;
    worker.publish(k + 1);
  }
  worker.catch_up(input.size());
  for (std::size_t k = 0; k < input.size(); ++k) ASSERT_EQ(output[k], static_cast<int>(k) + 1);
}

// An item that returns false stops the ones after it; restart() withdraws them, and new ones run.
TEST(InOrderThread, AHaltWithdrawsTheItemsAfterItUntilRestarted) {
  std::vector<std::size_t> ran;
  InOrderThread worker([&](std::size_t k) {
    ran.push_back(k);
    return k != 3;
  });
  worker.publish(8);
  worker.catch_up(8);
  EXPECT_TRUE(worker.halted());
  EXPECT_EQ(worker.done(), 4u);
  EXPECT_EQ(ran, (std::vector<std::size_t>{0, 1, 2, 3}));
  worker.restart();
  EXPECT_FALSE(worker.halted());
  EXPECT_EQ(worker.published(), 4u);
  worker.publish(6);
  worker.catch_up(6);
  EXPECT_EQ(ran, (std::vector<std::size_t>{0, 1, 2, 3, 4, 5}));
}

TEST(InOrderThread, WhatAnItemThrewIsRethrownAndHaltsTheRest) {
  std::atomic<int> ran{0};
  InOrderThread worker([&](std::size_t k) {
    ++ran;
    if (k == 2) throw std::runtime_error("item failed");
    return true;
  });
  worker.publish(5);
  EXPECT_THROW(worker.catch_up(5), std::runtime_error);
  EXPECT_EQ(ran.load(), 3);
  EXPECT_EQ(worker.done(), 3u);
  EXPECT_NO_THROW(worker.rethrow_error());  // once
}

// A thread asleep after its spin (nothing published for a while) still takes the next item.
TEST(InOrderThread, TheThreadWakesUpForAnItemAfterSleeping) {
  std::thread::id ran_on;
  InOrderThread worker([&](std::size_t) {
    ran_on = std::this_thread::get_id();
    return true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  worker.publish(1);
  for (int waited = 0; worker.done() < 1 && waited < 5000; ++waited)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  worker.catch_up(1);
  EXPECT_NE(ran_on, std::this_thread::get_id());
  EXPECT_NE(ran_on, std::thread::id());
}

// Without a thread, items run on the caller, and only when it waits for them.
TEST(InOrderThread, WithoutAThreadTheCallerRunsEveryItem) {
  std::vector<std::thread::id> ran_on;
  InOrderThread worker(
      [&](std::size_t) {
        ran_on.push_back(std::this_thread::get_id());
        return true;
      },
      false);
  EXPECT_FALSE(worker.has_thread());
  worker.publish(3);
  EXPECT_EQ(worker.done(), 0u);  // nothing runs before it is waited for
  worker.catch_up(3);
  ASSERT_EQ(ran_on.size(), 3u);
  for (const auto& id : ran_on) EXPECT_EQ(id, std::this_thread::get_id());
}
