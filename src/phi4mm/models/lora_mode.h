// The per-request LoRA mode of the decoder (reference: Phi4MMForCausalLM.forward / InputMode):
// no adapter for text-only, the vision adapter whenever an image is present, the speech adapter
// for audio without images. Chosen once per request and kept for every step of the answer.
#pragma once

namespace phi4mm {

enum class LoraMode { kNone = 0, kVision = 1, kSpeech = 2 };

inline const char* LoraModeName(LoraMode m) {
  switch (m) {
    case LoraMode::kNone: return "none";
    case LoraMode::kVision: return "vision";
    case LoraMode::kSpeech: return "speech";
  }
  return "?";
}

// InputMode rule: any image -> vision; audio without images -> speech; otherwise none.
inline LoraMode LoraModeForInputs(bool has_images, bool has_audio) {
  if (has_images) return LoraMode::kVision;
  if (has_audio) return LoraMode::kSpeech;
  return LoraMode::kNone;
}

}  // namespace phi4mm
