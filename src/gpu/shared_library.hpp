// A vendor library opened with dlopen, for the GPU backends: it is closed when the owner goes, and a
// missing library or symbol is a GpuError(library_missing) that says what to install. Backends load
// their library at run time so that perseus builds and runs on machines without it.
#pragma once

#include <dlfcn.h>

#include <fmt/format.h>

#include <string>
#include <utility>

#include "perseus/gpu/gpu.hpp"

namespace perseus::gpu {

class SharedLibrary {
 public:
  // install_hint: what a user does when the library is missing ("Install the NVIDIA driver, or set ...").
  // too_old_hint: why a symbol may be missing ("the NVIDIA driver is too old").
  SharedLibrary(std::string path, const char* name, const char* install_hint, const char* too_old_hint)
      : path_(std::move(path)), too_old_hint_(too_old_hint) {
    handle_ = dlopen(path_.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) {
      const char* why = dlerror();
      throw GpuError(GpuErrorKind::library_missing, fmt::format("cannot load {} ({}): {}. {}", name, path_,
                                                                why ? why : "unknown error", install_hint));
    }
  }
  ~SharedLibrary() { dlclose(handle_); }
  SharedLibrary(const SharedLibrary&) = delete;
  SharedLibrary& operator=(const SharedLibrary&) = delete;

  // Sets fn to the exported symbol, or throws naming the library and the symbol.
  template <typename Fn>
  void resolve(Fn& fn, const char* symbol) const {
    fn = optional<Fn>(symbol);
    if (fn == nullptr)
      throw GpuError(GpuErrorKind::library_missing,
                     fmt::format("{} does not export {}: {}", path_, symbol, too_old_hint_));
  }

  // The symbol, or nullptr where this version of the library lacks it.
  template <typename Fn>
  Fn optional(const char* symbol) const {
    return reinterpret_cast<Fn>(dlsym(handle_, symbol));
  }

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const char* too_old_hint_;
  void* handle_ = nullptr;
};

}  // namespace perseus::gpu
