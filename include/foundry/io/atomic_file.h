// Crash-safe file writing. A file written through AtomicFile appears under its final name only
// once it is complete and on disk: bytes go to a temporary file in the same folder, which is
// fsync'ed, renamed over the target, and the folder is fsync'ed so the rename itself survives a
// power loss. A reader therefore sees either the old file or the new one, never a torn write.
#pragma once

#include <cstddef>
#include <string>

namespace foundry::io {

class AtomicFile {
 public:
  /// Creates `<path>.tmp.<pid>.<n>` next to `path`. Throws IOError when it cannot.
  explicit AtomicFile(std::string path);
  /// Removes the temporary file unless commit() succeeded.
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  /// Appends bytes (retries short writes and EINTR). Throws IOError naming the file.
  void write(const void* data, size_t size);
  void write(const std::string& bytes) { write(bytes.data(), bytes.size()); }
  /// Bytes written so far.
  size_t size() const { return written_; }
  /// fsync, close, rename over the target, fsync the folder.
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return tmp_; }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  size_t written_ = 0;
  bool committed_ = false;
};

/// Writes bytes to path atomically (AtomicFile in one call).
void write_file_atomic(const std::string& path, const std::string& bytes);
/// Reads a whole file. Throws IOError naming the file.
std::string read_file(const std::string& path);
/// Throws IOError when `path` is a directory: an ifstream opens one and reads nothing, which its
/// reader would take for an empty `expected` ("a file", "a JSON Lines file").
void refuse_directory(const std::string& path, const char* expected = "a file");
/// fsync's a file that is already closed (opens it read-only). Throws IOError.
void fsync_file(const std::string& path);
/// fsync's a directory so that renames and creations inside it are durable. Throws IOError.
void fsync_dir(const std::string& dir);
/// The folder part of a path ("." when there is none).
std::string parent_dir(const std::string& path);

}  // namespace foundry::io
