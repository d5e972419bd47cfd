// The limits the audio decoder and feature extractor enforce, shared so callers and tests can check
// against them: the accepted sample-rate range and the longest clip accepted. The longest clip is
// set by the model's 131072-token context: at 12.5 audio tokens per second (10 ms frames, 8 frames
// per token) a 3-hour clip alone takes 135000 tokens, so nothing longer can ever fit a prompt.
#pragma once

#include <cstdint>

namespace phi4mm {

// The original extractor rejects rates below 8 kHz (reference-spec §4.1); above 192 kHz no real
// recording format is in use, and larger rates only make the resampling filter absurdly long.
inline constexpr int64_t kMinAudioSampleRate = 8000;
inline constexpr int64_t kMaxAudioSampleRate = 192000;
// Longest accepted clip, in seconds (see above). Longer audio is rejected, never truncated.
inline constexpr int64_t kMaxAudioSeconds = 3 * 3600;

}  // namespace phi4mm
