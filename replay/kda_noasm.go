//go:build !amd64 || noasm

package replay

func decayDotsSIMD(yk, yq []float64, a, x []float32) (float64, float64) {
	return decayDotsGo(yk, yq, a, x)
}

func decayDotSIMD(y []float64, a, x []float32) float64 { return decayDotGo(y, a, x) }
