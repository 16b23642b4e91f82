// copy_streaming must be memcpy, whatever the sizes and alignments, and touch nothing else.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "util/stream_copy.h"

namespace chorus {
namespace {

TEST(CopyStreaming, IsMemcpyForEverySizeAndAlignment) {
  const size_t sizes[] = {0, 1, 15, 63, 4095, 4096, 4097, 4096 + 63, 65536 + 37, (1 << 20) + 5};
  constexpr size_t kGuard = 64;
  for (size_t n : sizes) {
    for (size_t src_off : {0, 1, 8, 13}) {
      for (size_t dst_off : {0, 1, 7, 16, 17, 63}) {
        std::vector<unsigned char> src(n + kGuard), dst(n + 2 * kGuard, 0xa5);
        for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 131 + n);
        copy_streaming(dst.data() + kGuard / 2 + dst_off, src.data() + src_off, n);
        std::vector<unsigned char> want(n + 2 * kGuard, 0xa5);
        if (n > 0) std::memcpy(want.data() + kGuard / 2 + dst_off, src.data() + src_off, n);
        ASSERT_EQ(dst, want) << n << " bytes, source offset " << src_off << ", destination offset "
                             << dst_off;
      }
    }
  }
}

}  // namespace
}  // namespace chorus
