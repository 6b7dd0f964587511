// A trie over bytes with sorted edges: the added tokens' longest match (added_vocabulary.cpp) and
// the Unigram model's common prefixes (unigram.cpp) walk the same structure.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace foundry::text {

class ByteTrie {
  // The edge for byte c, or where it would go (edges sorted by byte).
  template <class E>
  static auto edge(E& edges, unsigned char c) {
    return std::lower_bound(edges.begin(), edges.end(), c, [](const auto& e, unsigned char x) { return e.first < x; });
  }

 public:
  ByteTrie() { nodes_.emplace_back(); }

  /// The value stored under key (empty until set), its nodes created as needed.
  std::optional<uint32_t>& value_at(std::string_view key) {
    int n = 0;
    for (unsigned char c : key) {
      auto& edges = nodes_[size_t(n)].edges;
      auto it = edge(edges, c);
      if (it != edges.end() && it->first == c) {
        n = it->second;
      } else {
        const int child = static_cast<int>(nodes_.size());
        edges.insert(it, {c, child});
        nodes_.emplace_back();  // moves the nodes: `edges` is not used after this
        n = child;
      }
    }
    return nodes_[size_t(n)].value;
  }

  /// f(length, value) for each stored key that s[start...] begins with, shortest first.
  template <typename F>
  void each_prefix(std::string_view s, size_t start, F&& f) const {
    int n = 0;
    for (size_t i = start; i < s.size(); ++i) {
      const auto c = static_cast<unsigned char>(s[i]);
      const auto& edges = nodes_[size_t(n)].edges;
      auto it = edge(edges, c);
      if (it == edges.end() || it->first != c) return;
      n = it->second;
      if (const std::optional<uint32_t>& value = nodes_[size_t(n)].value) f(i + 1 - start, *value);
    }
  }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int>> edges;  // sorted by byte
    std::optional<uint32_t> value;
  };
  std::vector<Node> nodes_;
};

}  // namespace foundry::text
