#include "perseus/util/atomic_file.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <sstream>

#include "perseus/util/error.hpp"

namespace perseus {

AtomicFile::AtomicFile(std::filesystem::path target) : target_(std::move(target)) {
  temp_ = target_;
  temp_ += fmt::format(".tmp.{}", ::getpid());
  out_.open(temp_, std::ios::binary | std::ios::trunc);
  if (!out_) {
    throw Error(fmt::format("cannot write '{}'", temp_.string()), ErrorKind::cannot_write);
  }
}

AtomicFile::~AtomicFile() {
  if (!committed_) {
    out_.close();
    std::error_code ec;
    std::filesystem::remove(temp_, ec);
  }
}

void AtomicFile::commit() {
  out_.flush();
  const bool ok = static_cast<bool>(out_);
  out_.close();
  std::error_code ec;
  if (ok) std::filesystem::rename(temp_, target_, ec);
  if (!ok || ec) {
    std::filesystem::remove(temp_, ec);
    throw Error(fmt::format("cannot write '{}'", target_.string()), ErrorKind::cannot_write);
  }
  committed_ = true;
}

void write_file_atomic(const std::filesystem::path& target, const std::string& content) {
  AtomicFile file(target);
  file.stream() << content;
  file.commit();
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("cannot read '{}'", path.string()), ErrorKind::not_found);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace perseus
