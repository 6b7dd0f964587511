#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "foundry/core/error.h"
#include "foundry/io/atomic_file.h"

namespace foundry::io {

namespace {
std::atomic<uint64_t> temp_counter{0};

std::string errno_text(int e) { return std::strerror(e); }
}  // namespace

std::string parent_dir(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

void fsync_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) raise<IOError>("cannot open '{}' to flush it: {}", path, errno_text(errno));
  if (::fsync(fd) != 0) {
    int e = errno;
    ::close(fd);
    raise<IOError>("cannot flush '{}': {}", path, errno_text(e));
  }
  ::close(fd);
}

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) raise<IOError>("cannot open folder '{}' to flush it: {}", dir, errno_text(errno));
  // Some file systems refuse fsync on directories (EINVAL); the rename is then as durable as
  // that file system makes it, which is not an error of ours.
  if (::fsync(fd) != 0 && errno != EINVAL) {
    int e = errno;
    ::close(fd);
    raise<IOError>("cannot flush folder '{}': {}", dir, errno_text(e));
  }
  ::close(fd);
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  tmp_ = path_ + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(temp_counter.fetch_add(1));
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) raise<IOError>("cannot create '{}': {}", tmp_, errno_text(errno));
}

AtomicFile::~AtomicFile() {
  if (committed_) return;
  if (fd_ >= 0) ::close(fd_);
  ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* data, size_t size) {
  if (fd_ < 0) raise<IOError>("'{}': write after commit", path_);
  const char* p = static_cast<const char*>(data);
  size_t off = 0;
  while (off < size) {
    // Linux writes at most ~2 GiB per call; larger requests come back short and loop.
    ssize_t w = ::write(fd_, p + off, size - off);
    if (w < 0) {
      if (errno == EINTR) continue;
      raise<IOError>("cannot write '{}': {}", tmp_, errno_text(errno));
    }
    off += size_t(w);
  }
  written_ += size;
}

void AtomicFile::commit() {
  if (fd_ < 0) raise<IOError>("'{}': committed twice", path_);
  if (::fsync(fd_) != 0) raise<IOError>("cannot flush '{}': {}", tmp_, errno_text(errno));
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) raise<IOError>("cannot close '{}': {}", tmp_, errno_text(errno));
  if (::rename(tmp_.c_str(), path_.c_str()) != 0)
    raise<IOError>("cannot rename '{}' to '{}': {}", tmp_, path_, errno_text(errno));
  committed_ = true;
  fsync_dir(parent_dir(path_));
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  AtomicFile f(path);
  f.write(bytes);
  f.commit();
}

void refuse_directory(const std::string& path, const char* expected) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) raise<IOError>("'{}' is a directory, not {}", path, expected);
}

std::string read_file(const std::string& path) {
  refuse_directory(path);  // callers saw an empty file ("no data path given") instead of the mistake
  std::ifstream f(path, std::ios::binary);
  if (!f) raise<IOError>("cannot open '{}': {}", path, errno_text(errno));
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) raise<IOError>("cannot read '{}'", path);
  return ss.str();
}

}  // namespace foundry::io
