#pragma once
// Writes a file so that readers see either the old file or the complete new one, never a
// half-written one: the data goes to a temporary file beside the target, then it is renamed.
#include <filesystem>
#include <fstream>
#include <string>

namespace perseus {

class AtomicFile {
 public:
  explicit AtomicFile(std::filesystem::path target);
  ~AtomicFile();  // removes the temporary file unless commit() succeeded
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  std::ostream& stream() { return out_; }
  void commit();  // flushes, closes and renames; throws Error (ErrorKind::cannot_write) on failure

 private:
  std::filesystem::path target_;
  std::filesystem::path temp_;
  std::ofstream out_;
  bool committed_ = false;
};

void write_file_atomic(const std::filesystem::path& target, const std::string& content);

// Reads a whole file; throws Error (ErrorKind::not_found) naming the path when it cannot.
std::string read_file(const std::filesystem::path& path);

}  // namespace perseus
