// weights.h — the one list of a layer's weights (GGUF name, role, shape, required) that drives
// loading with its type and shape checks, placement on a backend (model.cpp) and the planner's
// byte counts (footprint.cpp), and the checks of the model-wide tensors.
#pragma once
#include <stdint.h>
#include <string>
#include <vector>
#include "gguf/gguf.h"
#include "model/model.h"
#include "model/tensor.h"

namespace lll {

// A weight's role decides what the file must hold: a Matrix is 2-D of a type the matmuls run,
// rows a whole number of blocks; a Vector (norm weight, bias) is 1-D F32.
enum class WeightKind { Matrix, Vector };
// Its dimensions, in the model's hyper-parameters.
enum class Dim { One, Embd, QWidth, KVWidth, FF, HeadDim, FFExp, NExpert };
// Whether the file must hold it: always; never; when the model's FFN is dense (no experts);
// when it has experts.
enum class Need { Always, Optional, Dense, Experts };

struct LayerWeightSpec {
    const char* suffix;                 // GGUF name after "blk.N."
    WeightRef LayerWeights::*member;
    WeightKind kind;
    Dim ne0, ne1;                       // row length, rows (One for vectors)
    Need need;
};
// In the order a token uses them (the order of the CPU's repacked arena).
const std::vector<LayerWeightSpec>& layer_weight_specs();

// A mixture-of-experts layer's 3-D tensor [ne0, ne1, n_expert]: expert e's matrix is its e-th
// slice of ne1 rows, which loading gives as a view (no copy). Required when the model has experts.
struct ExpertWeightSpec {
    const char* suffix;
    std::vector<WeightRef> LayerWeights::*member;
    Dim ne0, ne1;
};
const std::vector<ExpertWeightSpec>& expert_weight_specs();

// A fused matrix some architectures store instead of several (Phi-3: attn_qkv holds Q, K and V;
// ffn_up holds gate then up): its rows are the parts' rows one after another, and loading gives
// each part a row view of it (no copy). It applies when the file has the fused tensor with the
// parts' rows in all and none of the parts' own tensors besides it.
struct FusedPart {
    WeightRef LayerWeights::*member;
    Dim rows;
    const char* own_suffix;   // the part's own tensor (e.g. attn_q.weight)
};
struct FusedWeightSpec {
    const char* suffix;
    std::vector<FusedPart> parts;
};
const std::vector<FusedWeightSpec>& fused_weight_specs();

int64_t dim_value(const HParams& hp, Dim d);

// A tensor checked against its role and expected shape; `required` false returns an absent
// ref when the file lacks it.
WeightRef load_weight(const GGUFFile& f, const std::string& name, WeightKind kind, int64_t ne0, int64_t ne1,
                      bool required);
// Token embedding, output norm and head (tied when output.weight is absent) and every layer's
// weights of the list; refuses blk.N.* tensors at or beyond block_count.
void load_model_weights(const GGUFFile& f, const HParams& hp, ModelWeights& w);
// Only the layers' weights of the list (every one optional when all_optional: an architecture
// outside the decoder mould then checks what it needs itself, e.g. bert.cpp).
void load_layer_weights(const GGUFFile& f, const HParams& hp, ModelWeights& w, bool all_optional);

// The list's matrices (then each expert's gate, up and down) / vectors of one layer, in its order.
std::vector<WeightRef*> layer_matrices(LayerWeights& L);
std::vector<WeightRef*> layer_vectors(LayerWeights& L);

// Where the layers and the output head run for n_gpu_layers (llama.cpp's -ngl): the last
// n_gpu_layers layers and, when there is any, the output head on `offload` (a device placement,
// backends/registry.h resolve_offload); the rest and the input embedding on the host.
LayerPlacement place_layers(int n_layer, int n_gpu_layers, Placement offload);
// The distinct placements of lp, the host's first (it is always used: embedding, sampling).
std::vector<Placement> placements_used(const LayerPlacement& lp);

// The weights the backend at `p` holds, in the order a token uses them: its layers' matrices
// then the output matrix; the output norm then its layers' vectors.
struct PlacedWeights {
    std::vector<WeightRef*> matrices, vectors;
    int n_layers = 0;
};
PlacedWeights weights_on(ModelWeights& w, const LayerPlacement& lp, Placement p);

}  // namespace lll
