// LD_PRELOAD library for fault tests: a full or slow disk for one folder, without root or a
// filesystem of its own. While the file $PERSEUS_DISK_FULL_FLAG exists, every write to a file under
// $PERSEUS_DISK_FULL_DIR (an absolute, canonical path) fails with ENOSPC, as on a full filesystem;
// with $PERSEUS_DISK_SLOW_US set, every fsync/fdatasync of a file under that folder takes that many
// microseconds longer, as on a busy disk (a store's commits fall behind its acknowledgements if it
// acknowledges early). Every other file (the server's log) is written as usual.
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

bool under_dir(int fd) {
  static const char* dir = std::getenv("PERSEUS_DISK_FULL_DIR");
  if (dir == nullptr) return false;
  char link[64];
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  char path[PATH_MAX];
  ssize_t n = ::readlink(link, path, sizeof path - 1);
  if (n <= 0) return false;
  path[n] = '\0';
  return std::strncmp(path, dir, std::strlen(dir)) == 0;
}

bool full(int fd) {
  static const char* flag = std::getenv("PERSEUS_DISK_FULL_FLAG");
  return flag != nullptr && ::access(flag, F_OK) == 0 && under_dir(fd);
}

void slow_sync(int fd) {
  static const long delay_us = [] {
    const char* slow = std::getenv("PERSEUS_DISK_SLOW_US");
    return slow != nullptr ? std::atol(slow) : 0L;
  }();
  if (delay_us > 0 && under_dir(fd)) ::usleep(static_cast<useconds_t>(delay_us));
}

template <typename Function>
Function next(const char* name) {
  return reinterpret_cast<Function>(::dlsym(RTLD_NEXT, name));
}

}  // namespace

#define PERSEUS_FAIL_WHEN_FULL(fd) \
  if (full(fd)) {                  \
    errno = ENOSPC;                \
    return -1;                     \
  }

extern "C" {

ssize_t write(int fd, const void* data, size_t n) {
  static auto real = next<ssize_t (*)(int, const void*, size_t)>("write");
  PERSEUS_FAIL_WHEN_FULL(fd)
  return real(fd, data, n);
}

ssize_t pwrite(int fd, const void* data, size_t n, off_t offset) {
  static auto real = next<ssize_t (*)(int, const void*, size_t, off_t)>("pwrite");
  PERSEUS_FAIL_WHEN_FULL(fd)
  return real(fd, data, n, offset);
}

ssize_t pwrite64(int fd, const void* data, size_t n, off64_t offset) {
  static auto real = next<ssize_t (*)(int, const void*, size_t, off64_t)>("pwrite64");
  PERSEUS_FAIL_WHEN_FULL(fd)
  return real(fd, data, n, offset);
}

ssize_t writev(int fd, const struct iovec* parts, int count) {
  static auto real = next<ssize_t (*)(int, const struct iovec*, int)>("writev");
  PERSEUS_FAIL_WHEN_FULL(fd)
  return real(fd, parts, count);
}

ssize_t pwritev(int fd, const struct iovec* parts, int count, off_t offset) {
  static auto real = next<ssize_t (*)(int, const struct iovec*, int, off_t)>("pwritev");
  PERSEUS_FAIL_WHEN_FULL(fd)
  return real(fd, parts, count, offset);
}

int fallocate(int fd, int mode, off_t offset, off_t length) {
  static auto real = next<int (*)(int, int, off_t, off_t)>("fallocate");
  PERSEUS_FAIL_WHEN_FULL(fd)
  return real(fd, mode, offset, length);
}

int posix_fallocate(int fd, off_t offset, off_t length) {
  static auto real = next<int (*)(int, off_t, off_t)>("posix_fallocate");
  if (full(fd)) return ENOSPC;
  return real(fd, offset, length);
}

int fsync(int fd) {
  static auto real = next<int (*)(int)>("fsync");
  slow_sync(fd);
  return real(fd);
}

int fdatasync(int fd) {
  static auto real = next<int (*)(int)>("fdatasync");
  slow_sync(fd);
  return real(fd);
}

}  // extern "C"
