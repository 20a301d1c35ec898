// Package hfconfig reads a Hugging Face config.json of the hybrid SSM/attention
// families replayssm runs (nemotron_h, qwen3_next, qwen3_5, qwen3_5_moe,
// mamba2, kimi_linear) into one normalised, validated Config.
//
// Normalised means: every spelling of a field (hub configs, transformers 5.x
// saves, legacy aliases such as mamba_n_groups or attention_head_dim, the
// state-spaces mamba_ssm format) lands in the same Config field; layer layouts
// given as a pattern string, a list, or an attention interval become one
// []Layer; fields nested under a VLM wrapper's text_config are read from
// there; absent fields take the default of the transformers 5.x configuration
// class, so a Config means what transformers would build (head_dim, for
// instance, defaults to 128 for nemotron_h and 256 for the Qwen families, not
// to hidden_size/heads). The sizes the model cannot run without (hidden size,
// vocabulary, layer layout) must be present.
//
// The tests check Parse against transformers itself: configs saved by
// transformers 5.17 and the modules it built from them (testdata/hf, made by
// testdata/gen_reference.py), plus hand-written hub-style configs.
package hfconfig

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ErrUnsupported is wrapped by the error for a model_type this package does
// not know.
var ErrUnsupported = errors.New("unsupported model")

// Family is the architecture family, which decides the block structure.
type Family uint8

// The supported families.
const (
	UnknownFamily Family = iota
	NemotronH            // model_type nemotron_h: one mixer per layer (Mamba-2, attention, MLP or MoE)
	Qwen3Next            // model_type qwen3_next: GDN or attention, then MLP or MoE, per layer
	Qwen35               // model_type qwen3_5 / qwen3_5_text: GDN or attention, then a dense MLP
	Qwen35MoE            // model_type qwen3_5_moe / qwen3_5_moe_text: GDN or attention, then MoE
	Mamba2               // model_type mamba2, or a state-spaces mamba_ssm config: Mamba-2 only
	KimiLinear           // model_type kimi_linear: Kimi Delta Attention or latent attention, then MLP or MoE, per layer
)

// String returns the family's canonical model_type.
func (f Family) String() string {
	switch f {
	case NemotronH:
		return "nemotron_h"
	case Qwen3Next:
		return "qwen3_next"
	case Qwen35:
		return "qwen3_5"
	case Qwen35MoE:
		return "qwen3_5_moe"
	case Mamba2:
		return "mamba2"
	case KimiLinear:
		return "kimi_linear"
	}
	return "unknown"
}

// modelTypes maps every accepted model_type to its family.
var modelTypes = map[string]Family{
	"nemotron_h":       NemotronH,
	"qwen3_next":       Qwen3Next,
	"qwen3_5":          Qwen35,
	"qwen3_5_text":     Qwen35,
	"qwen3_5_moe":      Qwen35MoE,
	"qwen3_5_moe_text": Qwen35MoE,
	"mamba2":           Mamba2,
	"kimi_linear":      KimiLinear,
}

// SupportedModelTypes returns the model_type values Parse accepts, sorted.
func SupportedModelTypes() []string {
	var s []string
	for k := range modelTypes {
		s = append(s, k)
	}
	slices.Sort(s)
	return s
}

// LayerKind is what one residual branch of a layer computes.
type LayerKind uint8

// The kinds of residual branch. None marks an absent branch (the FFN of a
// NemotronH or Mamba-2 layer).
const (
	None               LayerKind = iota
	Mamba                        // Mamba-2 mixer (docs/DESIGN.md 1.1)
	Attention                    // softmax attention, GQA
	GatedDeltaNet                // Gated DeltaNet, "linear_attention" in Qwen configs (docs/DESIGN.md 1.2)
	MLP                          // dense MLP: relu² (NemotronH) or SwiGLU (Qwen)
	MoE                          // mixture of experts
	KimiDeltaAttention           // Kimi Delta Attention: GDN with a decay per key channel, "linear_attention" in Kimi configs (docs/DESIGN.md 2.2b)
	LatentAttention              // multi-head latent attention (MLA), "full_attention" in Kimi configs
)

// String returns the kind's name, e.g. "gated_deltanet".
func (k LayerKind) String() string {
	switch k {
	case None:
		return "none"
	case Mamba:
		return "mamba"
	case Attention:
		return "attention"
	case GatedDeltaNet:
		return "gated_deltanet"
	case MLP:
		return "mlp"
	case MoE:
		return "moe"
	case KimiDeltaAttention:
		return "kimi_delta_attention"
	case LatentAttention:
		return "latent_attention"
	}
	return fmt.Sprintf("LayerKind(%d)", uint8(k))
}

// Layer is one decoder layer.
//
// NemotronH and Mamba-2 layers have a single residual branch,
// h += Mixer(norm(h)), and Mixer may be any kind (a NemotronH "-" layer is
// Layer{Mixer: MLP}); FFN is None. Qwen3-Next and Qwen3.5 layers have two,
// h += Mixer(norm1(h)); h += FFN(norm2(h)), with Mixer GatedDeltaNet or
// Attention and FFN MLP or MoE; Kimi-Linear layers too, with Mixer
// KimiDeltaAttention or LatentAttention. A mamba_ssm config with d_intermediate > 0
// also gives every layer an MLP FFN.
type Layer struct {
	Mixer LayerKind
	FFN   LayerKind
}

// String returns "mixer" or "mixer+ffn", e.g. "attention+moe".
func (l Layer) String() string {
	if l.FFN == None {
		return l.Mixer.String()
	}
	return l.Mixer.String() + "+" + l.FFN.String()
}

// Config is the normalised union of the fields replayssm needs. Sub-configs of
// kinds the model does not use hold their defaults and are not validated.
type Config struct {
	Family           Family
	ModelType        string   // of the language model: text_config's model_type for a VLM wrapper
	WrapperModelType string   // the outer model_type when fields came from text_config, else ""
	Architectures    []string // as written, e.g. ["NemotronHForCausalLM"]
	MambaSSM         bool     // the config is in state-spaces/mamba_ssm format, not transformers'

	HiddenSize            int
	NumLayers             int // len(Layers)
	VocabSize             int
	IntermediateSize      int    // dense MLP width
	HiddenAct             string // dense MLP activation: "relu2" (NemotronH), "silu" (Qwen SwiGLU)
	TieWordEmbeddings     bool   // a wrapper's text_config value wins over the outer one
	RMSNormEps            float64
	MaxPositionEmbeddings int
	BOSTokenID            int   // -1 if absent
	PadTokenID            int   // -1 if absent
	EOSTokenIDs           []int // eos_token_id, as a list

	Layers []Layer

	Mamba     MambaConfig
	GDN       GDNConfig
	KDA       KDAConfig
	Attention AttentionConfig
	MLA       MLAConfig
	MoE       MoEConfig
	MTP       MTPConfig

	// AttnResBlockSize is Kimi K3's block attention residuals (layers
	// grouped in blocks whose sub-layer inputs attend over the completed
	// blocks); 0, the plain residual stream, everywhere else. Parsed so
	// that such a model is refused, not run wrongly.
	AttnResBlockSize int
}

// MambaConfig holds the Mamba-2 mixer's sizes (docs/DESIGN.md 1.1 names: H heads,
// P head dim, N state, G groups, K conv width, I = H·P).
type MambaConfig struct {
	NumHeads   int // H
	HeadDim    int // P
	StateSize  int // N
	NumGroups  int // G
	ConvKernel int // K
	InnerSize  int // I = H·P; for nemotron_h this need not equal Expand·HiddenSize
	Expand     float64
	ChunkSize  int
	ConvBias   bool
	ProjBias   bool // bias on in_proj and out_proj
	HiddenAct  string
	// TimeStepLimit clamps Δ; (0, +Inf) means no clamp.
	TimeStepLimit            [2]float64
	TimeStepMin, TimeStepMax float64
	TimeStepFloor            float64
	NormBeforeGate           bool // false: rmsnorm(y·silu(z)), the gate before the norm
	NormGroupSize            int  // elements per RMS group of the gated norm: I/G (nemotron_h, mamba_ssm) or I (transformers Mamba2)
}

// ConvDim returns the conv1d channel count, I + 2·G·N.
func (m MambaConfig) ConvDim() int { return m.InnerSize + 2*m.NumGroups*m.StateSize }

// InProjSize returns in_proj's output size, [z | xBC | dt] = 2·I + 2·G·N + H.
func (m MambaConfig) InProjSize() int { return 2*m.InnerSize + 2*m.NumGroups*m.StateSize + m.NumHeads }

// StateElements returns the recurrent state per sequence, H·P·N.
func (m MambaConfig) StateElements() int { return m.NumHeads * m.HeadDim * m.StateSize }

// GDNConfig holds the Gated DeltaNet mixer's sizes (docs/DESIGN.md 1.2).
type GDNConfig struct {
	NumKeyHeads   int // Hk
	NumValueHeads int // Hv; value head j uses key head j/(Hv/Hk)
	KeyHeadDim    int // dk
	ValueHeadDim  int // dv
	ConvKernel    int
}

// KeyDim returns Hk·dk.
func (g GDNConfig) KeyDim() int { return g.NumKeyHeads * g.KeyHeadDim }

// ValueDim returns Hv·dv.
func (g GDNConfig) ValueDim() int { return g.NumValueHeads * g.ValueHeadDim }

// ConvDim returns the conv1d channel count over [q | k | v], 2·Hk·dk + Hv·dv.
func (g GDNConfig) ConvDim() int { return 2*g.KeyDim() + g.ValueDim() }

// StateElements returns the recurrent state per sequence, Hv·dk·dv.
func (g GDNConfig) StateElements() int { return g.NumValueHeads * g.KeyHeadDim * g.ValueHeadDim }

// KDAConfig holds the Kimi Delta Attention mixer's sizes (docs/DESIGN.md
// 2.2b). Kimi-Linear gives keys and values the same heads and head size.
type KDAConfig struct {
	NumHeads   int // key and value heads
	HeadDim    int // dk = dv, also the rank of the low-rank gate projections
	ConvKernel int // short convolutions over q, k and v
	// GateLowerBound, when negative, selects Kimi K3's bounded forget gate
	// g = bound·sigmoid(exp(A_log)·(f + dt_bias)) instead of Kimi-Linear's
	// −exp(A_log)·softplus(f + dt_bias); 0 means none.
	GateLowerBound float64
	// FullRankGate: Kimi K3's full-rank gate projections instead of the
	// low-rank f_a/f_b and g_a/g_b pairs.
	FullRankGate bool
}

// Dim returns heads·head size, the width of q, k, v and the gates.
func (k KDAConfig) Dim() int { return k.NumHeads * k.HeadDim }

// StateElements returns the recurrent state per sequence, heads·dk·dv.
func (k KDAConfig) StateElements() int { return k.NumHeads * k.HeadDim * k.HeadDim }

// MLAConfig holds the multi-head latent attention layers' sizes
// (DeepSeek-V2's MLA as Kimi-Linear uses it). The keys and values of every
// head are rebuilt from one shared latent of KVLoraRank values (normalised)
// and one shared rope part of QKRopeHeadDim values per position.
type MLAConfig struct {
	NumHeads      int
	NumKVHeads    int // as written; MLA gives every head its own key and value
	QLoraRank     int // 0: q_proj directly (Kimi-Linear), else q_a_proj → norm → q_b_proj
	KVLoraRank    int
	QKNopeHeadDim int
	QKRopeHeadDim int
	VHeadDim      int
	// NoPE: the rope parts of queries and keys take part in the scores
	// unrotated (Kimi's mla_use_nope); false means RoPE on them
	// (DeepSeek), which is not supported.
	NoPE       bool
	OutputGate bool // Kimi K3's sigmoid output gate; not supported
	RopeTheta  float64
}

// QKHeadDim returns the query and key head size, nope + rope parts.
func (m MLAConfig) QKHeadDim() int { return m.QKNopeHeadDim + m.QKRopeHeadDim }

// LatentDim returns the values a position keeps in the cache: the latent
// and the shared rope part.
func (m MLAConfig) LatentDim() int { return m.KVLoraRank + m.QKRopeHeadDim }

// AttentionConfig holds the attention layers' sizes and position encoding.
type AttentionConfig struct {
	NumHeads      int
	NumKVHeads    int
	HeadDim       int
	Bias          bool // q/k/v/o projections carry a bias
	OutputGate    bool // q_proj also yields a per-head gate, output ·= sigmoid(gate) (Qwen)
	QKNorm        bool // per-head RMSNorm of q and k before RoPE (Qwen)
	SlidingWindow int  // 0: full causal attention

	Rope                bool    // false: no positional encoding (NemotronH)
	RopeTheta           float64 // base
	PartialRotaryFactor float64 // fraction of HeadDim rotated
	RotaryDim           int     // HeadDim·PartialRotaryFactor, the leading dims rotated
	RopeType            string  // "default", or a scaling type such as "yarn"
	RopeScalingFactor   float64 // 0 when there is no scaling
	MRopeSection        []int   // multi-axis RoPE sections (Qwen3.5); sums to RotaryDim/2
	MRopeInterleaved    bool
}

// Router says how MoE router logits become expert weights.
type Router uint8

// The routers of the supported families.
const (
	NoRouter Router = iota
	// Softmax over all experts, top-k, renormalised if NormTopKProb (Qwen).
	Softmax
	// Sigmoid scores, top-k of score + e_score_correction_bias, weights the
	// chosen scores (renormalised if NormTopKProb) × RoutedScalingFactor (NemotronH).
	Sigmoid
)

// String returns "softmax", "sigmoid" or "none".
func (r Router) String() string {
	switch r {
	case Softmax:
		return "softmax"
	case Sigmoid:
		return "sigmoid"
	}
	return "none"
}

// MoEConfig holds the mixture-of-experts sizes and routing.
type MoEConfig struct {
	NumExperts                   int
	TopK                         int
	ExpertIntermediateSize       int
	NumSharedExperts             int
	SharedExpertIntermediateSize int
	SharedExpertGate             bool // shared expert output ·= sigmoid(shared_expert_gate(x)) (Qwen)
	Router                       Router
	CorrectionBias               bool // router has e_score_correction_bias (NemotronH)
	NormTopKProb                 bool
	RoutedScalingFactor          float64
	LatentSize                   int // experts run in this latent width (Nemotron-3-Super); 0: none
	NumExpertGroups              int // n_group
	TopKGroups                   int // topk_group
	DecoderSparseStep            int // qwen3_next: MoE on layers with (i+1) % step == 0
	MLPOnlyLayers                []int
}

// MTPConfig describes multi-token-prediction (draft) layers, which
// transformers drops on load but speculative decoding uses.
type MTPConfig struct {
	NumLayers int
	Layers    []Layer // NemotronH's mtp pattern (default attention, MoE); nil for Qwen
}

// Count returns how many residual branches of kind k the model has, over
// mixers and FFNs (MTP layers excluded); Count(None) is 0.
func (c *Config) Count(k LayerKind) int {
	if k == None {
		return 0
	}
	n := 0
	for _, l := range c.Layers {
		if l.Mixer == k {
			n++
		}
		if l.FFN == k {
			n++
		}
	}
	return n
}

// Load reads and parses the config.json at path. Errors start with the path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// LoadDir reads dir/config.json.
func LoadDir(dir string) (*Config, error) {
	return Load(filepath.Join(dir, "config.json"))
}

// Parse parses and validates the bytes of a config.json.
func Parse(data []byte) (*Config, error) {
	top, err := newObject(replaceNonFinite(data))
	if err != nil {
		return nil, err
	}
	c := &Config{Architectures: top.strs("architectures")}
	outerType := top.str("", "model_type")
	if *top.err != nil {
		return nil, *top.err
	}

	// A VLM wrapper keeps the language model's fields under text_config.
	o := top
	if text := top.object("text_config"); text != nil {
		o = text
		c.WrapperModelType = outerType
		c.ModelType = text.str("", "model_type")
		if c.ModelType == "" {
			if _, ok := modelTypes[outerType+"_text"]; ok {
				c.ModelType = outerType + "_text"
			} else {
				c.ModelType = outerType
			}
		}
	} else {
		c.ModelType = outerType
	}
	if *top.err != nil {
		return nil, *top.err
	}

	switch fam, ok := modelTypes[c.ModelType]; {
	case ok:
		c.Family = fam
	case c.ModelType == "" && top.has("ssm_cfg", "d_model"):
		c.Family, c.MambaSSM, c.ModelType = Mamba2, true, "mamba2"
	case c.ModelType == "":
		return nil, fmt.Errorf("no model_type (supported: %s): %w", strings.Join(SupportedModelTypes(), ", "), ErrUnsupported)
	default:
		return nil, fmt.Errorf("model_type %q is not supported (supported: %s): %w", c.ModelType, strings.Join(SupportedModelTypes(), ", "), ErrUnsupported)
	}

	switch {
	case c.MambaSSM:
		err = parseMambaSSM(c, o)
	case c.Family == NemotronH:
		err = parseNemotronH(c, o)
	case c.Family == Mamba2:
		err = parseMamba2(c, o)
	case c.Family == KimiLinear:
		err = parseKimiLinear(c, o)
	default:
		err = parseQwen(c, o)
	}
	// A type error found while reading (a string where a size belongs) is
	// the root cause of whatever check failed after it: report it first.
	if *o.err != nil {
		err = *o.err
	}
	if err != nil {
		return nil, err
	}

	// Fields a wrapper may keep outside text_config.
	if o != top {
		if !o.has("tie_word_embeddings") {
			c.TieWordEmbeddings = top.bool(c.TieWordEmbeddings, "tie_word_embeddings")
		}
		if !o.has("eos_token_id") {
			c.EOSTokenIDs = top.ints("eos_token_id")
		}
		if *top.err != nil {
			return nil, *top.err
		}
	}
	c.NumLayers = len(c.Layers)
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// common reads the fields every family spells the same way.
func common(c *Config, o *object, tieDefault bool) {
	c.HiddenSize = o.int(0, "hidden_size")
	c.VocabSize = o.int(0, "vocab_size")
	c.TieWordEmbeddings = o.bool(tieDefault, "tie_word_embeddings")
	c.MaxPositionEmbeddings = o.int(0, "max_position_embeddings")
	c.BOSTokenID = o.int(-1, "bos_token_id")
	c.PadTokenID = o.int(-1, "pad_token_id")
	c.EOSTokenIDs = o.ints("eos_token_id")
}

func required(o *object, keys ...string) error {
	if !o.has(keys...) {
		return fmt.Errorf("%s%s is missing", o.path, strings.Join(keys, " or "))
	}
	return nil
}
