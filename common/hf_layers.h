// The layer classes of Hugging Face transformers models that Accelerate
// configs name in fsdp_transformer_layer_cls_to_wrap ("BertLayer",
// "LlamaDecoderLayer", ...). With the gpt model, the Accelerate config reader
// maps each to the model's own transformer layer, Block.
#ifndef TRAINYARD_COMMON_HF_LAYERS_H_
#define TRAINYARD_COMMON_HF_LAYERS_H_

#include <algorithm>
#include <iterator>
#include <string>

namespace trainyard {

// Hugging Face transformers' layer classes that FSDP configs name in
// fsdp_transformer_layer_cls_to_wrap; the gpt model's counterpart is Block.
inline constexpr const char* kHuggingFaceLayers[] = {"AlbertLayer",
                                                     "BartDecoderLayer",
                                                     "BartEncoderLayer",
                                                     "BertLayer",
                                                     "BloomBlock",
                                                     "CLIPEncoderLayer",
                                                     "CodeGenBlock",
                                                     "DebertaLayer",
                                                     "DebertaV2Layer",
                                                     "ElectraLayer",
                                                     "FalconDecoderLayer",
                                                     "Gemma2DecoderLayer",
                                                     "Gemma3DecoderLayer",
                                                     "GemmaDecoderLayer",
                                                     "GPT2Block",
                                                     "GPTBigCodeBlock",
                                                     "GPTJBlock",
                                                     "GPTNeoBlock",
                                                     "GPTNeoXLayer",
                                                     "LlamaDecoderLayer",
                                                     "MistralDecoderLayer",
                                                     "MixtralDecoderLayer",
                                                     "MptBlock",
                                                     "MT5Block",
                                                     "OPTDecoderLayer",
                                                     "Phi3DecoderLayer",
                                                     "PhiDecoderLayer",
                                                     "Qwen2DecoderLayer",
                                                     "Qwen3DecoderLayer",
                                                     "RobertaLayer",
                                                     "T5Block",
                                                     "ViTLayer",
                                                     "WhisperDecoderLayer",
                                                     "WhisperEncoderLayer",
                                                     "XLMRobertaLayer"};

inline bool IsHuggingFaceLayer(const std::string& name) {
  return std::find(std::begin(kHuggingFaceLayers), std::end(kHuggingFaceLayers), name) != std::end(kHuggingFaceLayers);
}

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_HF_LAYERS_H_
