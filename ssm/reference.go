package ssm

import "math"

// Mamba2Params are a Mamba-2 layer's per-head constants.
type Mamba2Params struct {
	ALog   []float64 // A = −exp(A_log), one per head
	DtBias []float64 // added to dt before the softplus
	D      []float64 // skip connection
	// DtMin clamps Δ from below when positive: transformers' multi-token
	// (prefill, verify) path clamps Δ ≥ time_step_min; single-token decode
	// does not (docs/DESIGN.md 1.1).
	DtMin float64
}

// Mamba2Step64 runs one decode step of a Mamba-2 SSM core for a batch of
// sequences, in float64 (docs/DESIGN.md 1.1):
//
//	Δ    = softplus(dt + dt_bias)
//	S[h] = exp(Δ·A)·S[h] + Δ·x[h] ⊗ B[g(h)]
//	y[h] = S[h]·C[g(h)] + D·x[h]
//
// Layouts, for batch b: state[b][h][p][n], x[b][h][p], B and C [b][g][n],
// dt[b][h], y[b][h][p]. The state is updated in place.
func Mamba2Step64(sh Mamba2Shape, prm Mamba2Params, state, x, B, C, dt, y []float64) {
	H, P, N, G := sh.Heads, sh.HeadDim, sh.StateSize, sh.Groups
	batch := len(dt) / H
	for b := 0; b < batch; b++ {
		for h := 0; h < H; h++ {
			g := sh.Group(h)
			delta := max(Softplus(dt[b*H+h]+prm.DtBias[h]), prm.DtMin)
			a := math.Exp(delta * -math.Exp(prm.ALog[h]))
			Bv := B[(b*G+g)*N:][:N]
			Cv := C[(b*G+g)*N:][:N]
			for p := 0; p < P; p++ {
				xp := x[(b*H+h)*P+p]
				row := state[((b*H+h)*P+p)*N:][:N]
				sum := 0.0
				for n := range row {
					row[n] = a*row[n] + delta*xp*Bv[n]
					sum += row[n] * Cv[n]
				}
				y[(b*H+h)*P+p] = sum + prm.D[h]*xp
			}
		}
	}
}

// GDNParams are a Gated DeltaNet layer's per-value-head constants.
type GDNParams struct {
	ALog   []float64 // g = −exp(A_log)·softplus(a + dt_bias)
	DtBias []float64
}

// GDNStep64 runs one decode step of a Gated DeltaNet recurrence for a batch of
// sequences, in float64 (docs/DESIGN.md 1.2). q and k arrive after the convolution
// and its activation, before the l2 normalisation, which this function applies:
//
//	q, k = l2norm(q)/√dk, l2norm(k)
//	g    = −exp(A_log)·softplus(a + dt_bias);  β = sigmoid(b)
//	S    = exp(g)·S;  u = β·(v − Sᵀk);  S = S + k ⊗ u;  o = Sᵀq
//
// Layouts, for batch b: state[b][j][i][m] (value head j, key index i, value
// index m), q and k [b][kh][i], v [b][j][m], a and beta [b][j], o [b][j][m].
// The state is updated in place.
func GDNStep64(sh GDNShape, prm GDNParams, state, q, k, v, a, beta, o []float64) {
	Hk, Hv, dk, dv := sh.KeyHeads, sh.ValueHeads, sh.KeyDim, sh.ValueDim
	batch := len(a) / Hv
	qn := make([]float64, dk)
	kn := make([]float64, dk)
	u := make([]float64, dv)
	for b := 0; b < batch; b++ {
		for j := 0; j < Hv; j++ {
			kh := sh.KeyHead(j)
			L2Normalize(qn, q[(b*Hk+kh)*dk:][:dk])
			for i := range qn {
				qn[i] /= math.Sqrt(float64(dk))
			}
			L2Normalize(kn, k[(b*Hk+kh)*dk:][:dk])
			g := -math.Exp(prm.ALog[j]) * Softplus(a[b*Hv+j]+prm.DtBias[j])
			bt := Sigmoid(beta[b*Hv+j])
			S := state[(b*Hv+j)*dk*dv:][:dk*dv]
			for e := range S {
				S[e] *= math.Exp(g)
			}
			vj := v[(b*Hv+j)*dv:][:dv]
			for m := 0; m < dv; m++ {
				sk := 0.0
				for i := 0; i < dk; i++ {
					sk += S[i*dv+m] * kn[i]
				}
				u[m] = bt * (vj[m] - sk)
			}
			for i := 0; i < dk; i++ {
				for m := 0; m < dv; m++ {
					S[i*dv+m] += kn[i] * u[m]
				}
			}
			for m := 0; m < dv; m++ {
				sum := 0.0
				for i := 0; i < dk; i++ {
					sum += S[i*dv+m] * qn[i]
				}
				o[(b*Hv+j)*dv+m] = sum
			}
		}
	}
}

// L2Normalize writes x·rsqrt(Σx² + L2NormEps) to dst.
func L2Normalize(dst, x []float64) {
	ss := 0.0
	for _, e := range x {
		ss += e * e
	}
	r := 1 / math.Sqrt(ss+L2NormEps)
	for i, e := range x {
		dst[i] = e * r
	}
}
