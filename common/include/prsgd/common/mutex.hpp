// SPDX-License-Identifier: Apache-2.0
// A mutex and lock that clang's thread-safety analysis (-Wthread-safety) understands, and the attributes
// that say which data a mutex guards. libstdc++'s std::mutex carries no such attributes, so members
// declared PRSGD_GUARDED_BY(m) use prsgd::mutex m and are locked with prsgd::mutex_lock. Under other
// compilers the attributes expand to nothing and the types are thin wrappers around the std ones.
// The clang-tsa preset builds with -Werror=thread-safety.
#pragma once

#include <mutex>

#if defined(__clang__)
#define PRSGD_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define PRSGD_THREAD_ANNOTATION(x)
#endif

/// Marks a class as a lockable capability.
#define PRSGD_CAPABILITY(name) PRSGD_THREAD_ANNOTATION(capability(name))
/// Marks a RAII class that holds a capability for its lifetime.
#define PRSGD_SCOPED_CAPABILITY PRSGD_THREAD_ANNOTATION(scoped_lockable)
/// Marks a data member that may be read or written only while holding `m`.
#define PRSGD_GUARDED_BY(m) PRSGD_THREAD_ANNOTATION(guarded_by(m))
/// Marks a function that must be called with the given mutexes held.
#define PRSGD_REQUIRES(...) PRSGD_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
/// Marks a function that must be called without the given mutexes held (it takes them itself).
#define PRSGD_EXCLUDES(...) PRSGD_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
/// Marks a function that acquires the given mutexes (or `this` for a capability's own lock()).
#define PRSGD_ACQUIRE(...) PRSGD_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
/// Marks a function that releases the given mutexes (or `this`).
#define PRSGD_RELEASE(...) PRSGD_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
/// Marks a function that acquires the mutex when it returns `result`.
#define PRSGD_TRY_ACQUIRE(...) PRSGD_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))

namespace prsgd {

/// Wraps a std::mutex so that the thread-safety analysis tracks lock() and unlock(). Thread-safe.
/// Lock it with mutex_lock.
class PRSGD_CAPABILITY("mutex") mutex {
 public:
  mutex() = default;
  mutex(const mutex&) = delete;
  mutex& operator=(const mutex&) = delete;

  /// Blocks until the mutex is held.
  void lock() PRSGD_ACQUIRE() { m_.lock(); }
  /// Releases the mutex.
  void unlock() PRSGD_RELEASE() { m_.unlock(); }
  /// Takes the mutex if it is free; returns whether it did.
  [[nodiscard]] bool try_lock() PRSGD_TRY_ACQUIRE(true) { return m_.try_lock(); }

 private:
  std::mutex m_;
};

/// Holds a prsgd::mutex from construction to destruction (std::lock_guard that the analysis sees).
/// Not thread-safe itself: a stack object of one thread.
class PRSGD_SCOPED_CAPABILITY mutex_lock {
 public:
  /// Locks `m`.
  explicit mutex_lock(mutex& m) PRSGD_ACQUIRE(m) : m_(m) { m_.lock(); }
  /// Unlocks it.
  ~mutex_lock() PRSGD_RELEASE() { m_.unlock(); }
  mutex_lock(const mutex_lock&) = delete;
  mutex_lock& operator=(const mutex_lock&) = delete;

 private:
  mutex& m_;
};

}  // namespace prsgd
