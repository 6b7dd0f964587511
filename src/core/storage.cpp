#include "foundry/core/storage.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "foundry/core/allocator.h"
#include "foundry/core/error.h"

namespace foundry {

StorageImpl::StorageImpl(size_t nbytes)
    : data_(allocator::allocate(nbytes)), nbytes_(nbytes), kind_(Kind::Owned) {}

StorageImpl::StorageImpl(void* data, size_t nbytes, Kind kind, std::function<void()> release,
                         bool read_only)
    : data_(data), nbytes_(nbytes), kind_(kind), release_(std::move(release)), read_only_(read_only) {}

StorageImpl::~StorageImpl() {
  if (kind_ == Kind::Owned) {
    allocator::deallocate(data_, nbytes_);
  } else if (release_) {
    release_();
  }
}

Storage map_file_storage(const std::string& path, bool copy_on_write) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) raise<IOError>("cannot open '{}': {}", path, std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    raise<IOError>("cannot stat '{}': {}", path, std::strerror(e));
  }
  size_t size = size_t(st.st_size);
  void* p = nullptr;
  if (size > 0) {
    p = ::mmap(nullptr, size, copy_on_write ? PROT_READ | PROT_WRITE : PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      raise<IOError>("cannot map '{}': {}", path, std::strerror(e));
    }
  }
  ::close(fd);
  return make_ref<StorageImpl>(p, size, StorageImpl::Kind::Mapped,
                               [p, size] {
                                 if (p) ::munmap(p, size);
                               },
                               /*read_only=*/!copy_on_write);
}

}  // namespace foundry
