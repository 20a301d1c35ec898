package ssm

import "math"

// KDAStep64 is one float64 decode step of a Kimi Delta Attention core:
// Gated DeltaNet with a forget gate per key channel instead of one per
// head. For value head j (key head kh(j)), with q̂ and k̂ L2-normalised
// (q̂ also scaled by 1/√dk) and α = exp(g) per key channel:
//
//	S = Diag(α)·S;  u = β·(v − Sᵀk̂);  S = S + k̂ ⊗ u;  o = Sᵀq̂
//
// which is S_t = (I − β k̂ k̂ᵀ)·Diag(α_t)·S_{t−1} + β k̂ vᵀ. The gate
// arrives as its logarithm g ≤ 0 and β after its sigmoid: the layer
// computes both (KDA's low-rank gate projection through
// −exp(A_log)·softplus(· + dt_bias), or GLM's bounded sigmoid form).
//
// Layouts, for batch b: state[b][j][i][m] (value head j, key index i, value
// index m), q and k [b][kh][i], v [b][j][m], g [b][j][i], beta [b][j],
// o [b][j][m]. The state is updated in place.
func KDAStep64(sh GDNShape, state, q, k, v, g, beta, o []float64) {
	Hk, Hv, dk, dv := sh.KeyHeads, sh.ValueHeads, sh.KeyDim, sh.ValueDim
	batch := len(beta) / Hv
	qn := make([]float64, dk)
	kn := make([]float64, dk)
	u := make([]float64, dv)
	for b := range batch {
		for j := range Hv {
			kh := sh.KeyHead(j)
			L2Normalize(qn, q[(b*Hk+kh)*dk:][:dk])
			for i := range qn {
				qn[i] /= math.Sqrt(float64(dk))
			}
			L2Normalize(kn, k[(b*Hk+kh)*dk:][:dk])
			gj := g[(b*Hv+j)*dk:][:dk]
			S := state[(b*Hv+j)*dk*dv:][:dk*dv]
			for i := range dk {
				a := math.Exp(gj[i])
				for m := range dv {
					S[i*dv+m] *= a
				}
			}
			bt := beta[b*Hv+j]
			vj := v[(b*Hv+j)*dv:][:dv]
			for m := range dv {
				sk := 0.0
				for i := range dk {
					sk += S[i*dv+m] * kn[i]
				}
				u[m] = bt * (vj[m] - sk)
			}
			for i := range dk {
				for m := range dv {
					S[i*dv+m] += kn[i] * u[m]
				}
			}
			for m := range dv {
				sum := 0.0
				for i := range dk {
					sum += S[i*dv+m] * qn[i]
				}
				o[(b*Hv+j)*dv+m] = sum
			}
		}
	}
}

// KDAEntry is one step's inputs of one value head as a replay ring keeps
// them: the normalised key and (scaled) query of its key head, the value,
// the per-channel decay α = exp(g) and β.
type KDAEntry struct {
	K, Q, V, Alpha []float64 // [dk], [dk], [dv], [dk]
	Beta           float64
}

// KDAReplay64 computes, for one value head, the outputs of the steps in
// entries from the checkpoint S0 [dk][dv] alone, without the intermediate
// states (ReplaySSM's output path), and returns them with the folded state
// the plain recurrence would reach. With Γ(t,j) = Π_{l=j+1..t} Diag(α_l)
// (per key channel; Γ(t) = Γ(t,0)) and the pre-update state
// S'_t = Γ(t)·S0 + Σ_{j<t} Γ(t,j)·k_j ⊗ u_j:
//
//	u_t = β_t·(v_t − [S0ᵀ(Γ(t)·k_t) + Σ_{j<t} ((Γ(t,j)·k_j)·k_t)·u_j])
//	o_t = S0ᵀ(Γ(t)·q_t) + Σ_{j≤t} ((Γ(t,j)·k_j)·q_t)·u_j
//	S0 ← Γ(T)·S0 + Σ_j Γ(T,j)·k_j ⊗ u_j
//
// One read of S0 serves both products, now against the per-channel decayed
// key and query; the pair weights are decay-weighted dot products
// Σ_i Γ(t,j)_i·k_{j,i}·x_i rather than a scalar decay times k_j·x. The
// decays are products of the stored α, in float64 (docs/DESIGN.md 2.5).
func KDAReplay64(S0 []float64, dk, dv int, entries []KDAEntry) (o [][]float64, folded []float64) {
	T := len(entries)
	// cum[t][i] = Γ(t)_i = Π_{l≤t} α_l,i (entries are steps 1..T).
	cum := make([][]float64, T)
	prev := make([]float64, dk)
	for i := range prev {
		prev[i] = 1
	}
	for t, e := range entries {
		cum[t] = make([]float64, dk)
		for i := range dk {
			cum[t][i] = prev[i] * e.Alpha[i]
		}
		prev = cum[t]
	}
	// gamma(t, j)_i = Π_{l=j+1..t} α_l,i, for j < t (0-based steps).
	gamma := func(t, j, i int) float64 {
		p := 1.0
		for l := j + 1; l <= t; l++ {
			p *= entries[l].Alpha[i]
		}
		return p
	}
	s0T := func(x []float64) []float64 { // S0ᵀx
		r := make([]float64, dv)
		for i := range dk {
			for m := range dv {
				r[m] += S0[i*dv+m] * x[i]
			}
		}
		return r
	}
	us := make([][]float64, T)
	o = make([][]float64, T)
	for t, e := range entries {
		dkK, dkQ := make([]float64, dk), make([]float64, dk)
		for i := range dk {
			dkK[i] = cum[t][i] * e.K[i]
			dkQ[i] = cum[t][i] * e.Q[i]
		}
		sk, sq := s0T(dkK), s0T(dkQ)
		for j := range t {
			wk := 0.0
			for i := range dk {
				wk += gamma(t, j, i) * entries[j].K[i] * e.K[i]
			}
			for m := range dv {
				sk[m] += wk * us[j][m]
			}
		}
		us[t] = make([]float64, dv)
		for m := range dv {
			us[t][m] = e.Beta * (e.V[m] - sk[m])
		}
		for j := range t + 1 {
			wq := 0.0
			for i := range dk {
				wq += gamma(t, j, i) * entries[j].K[i] * e.Q[i]
			}
			for m := range dv {
				sq[m] += wq * us[j][m]
			}
		}
		o[t] = sq
	}
	folded = make([]float64, dk*dv)
	if T == 0 {
		copy(folded, S0)
		return o, folded
	}
	for i := range dk {
		for m := range dv {
			folded[i*dv+m] = cum[T-1][i] * S0[i*dv+m]
		}
	}
	for j := range T {
		for i := range dk {
			w := gamma(T-1, j, i) * entries[j].K[i]
			for m := range dv {
				folded[i*dv+m] += w * us[j][m]
			}
		}
	}
	return o, folded
}
