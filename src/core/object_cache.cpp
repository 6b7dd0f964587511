// detail::object_allocate / object_free (foundry/core/refcount.h).
#include "foundry/core/refcount.h"

#include <new>

namespace foundry::detail {

namespace {

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FOUNDRY_OBJECTS_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define FOUNDRY_OBJECTS_ASAN 1
#endif
#ifdef FOUNDRY_OBJECTS_ASAN
constexpr bool kRecycle = false;  // AddressSanitizer must see every object's end
#else
constexpr bool kRecycle = true;
#endif

constexpr size_t kClassBytes = 64;  // size classes of 64 bytes, objects up to 512
constexpr size_t kClasses = 8;
constexpr int kKeep = 128;  // objects kept per class and thread

struct Node {
  Node* next;
};

// Plain data, so it stays usable while the thread's other thread_locals are destroyed (a tensor
// dropped then goes back to the heap: `closed`).
struct Lists {
  Node* head[kClasses];
  int count[kClasses];
  bool registered, closed;
};
thread_local Lists t_lists{};

// Gives the cached objects back to the heap when the thread ends.
struct Drain {
  ~Drain() {
    t_lists.closed = true;
    for (size_t c = 0; c < kClasses; ++c)
      while (Node* n = t_lists.head[c]) {
        t_lists.head[c] = n->next;
        ::operator delete(static_cast<void*>(n));
      }
  }
};
thread_local Drain t_drain;

size_t class_of(size_t bytes) { return (bytes + kClassBytes - 1) / kClassBytes - 1; }

}  // namespace

bool objects_recycled() { return kRecycle; }

void* object_allocate(size_t bytes) {
  const size_t c = class_of(bytes);
  if (kRecycle && c < kClasses) {
    Lists& l = t_lists;
    if (Node* n = l.head[c]) {
      l.head[c] = n->next;
      --l.count[c];
      return n;
    }
    return ::operator new((c + 1) * kClassBytes);  // the class's size: any object of it can reuse it
  }
  return ::operator new(bytes);
}

void object_free(void* p, size_t bytes) noexcept {
  if (!p) return;
  const size_t c = class_of(bytes);
  if (kRecycle && c < kClasses) {
    Lists& l = t_lists;
    if (!l.closed && l.count[c] < kKeep) {
      if (!l.registered) {
        l.registered = true;
        (void)&t_drain;  // constructs it, so its destructor runs at thread exit
      }
      auto* n = static_cast<Node*>(p);
      n->next = l.head[c];
      l.head[c] = n;
      ++l.count[c];
      return;
    }
  }
  ::operator delete(p);
}

}  // namespace foundry::detail
