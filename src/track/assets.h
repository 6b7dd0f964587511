// The dashboard's static files, compiled in (see cmake/EmbedAssets.cmake).
#pragma once

#include <cstddef>

namespace foundry::track {

struct Asset {
  const char* url;
  const char* mime;
  const unsigned char* data;
  size_t size;
};
extern const Asset kDashboardAssets[];
extern const size_t kDashboardAssetCount;

}  // namespace foundry::track
