package cuda

// Attention over the KV cache runs two kernels (kernels/nn.cu): nn_attend
// takes a row at a time (a decode step's rows), nn_attend_mma_<hd> takes up
// to attendTileRows consecutive positions of one sequence together (a
// prompt's rows) on tensor cores, staging each block of keys and values
// once for all of them.
const (
	// attendTileRows and attendTileKeys are ATT_ROWS and ATT_KEYS of
	// nn_attend_mma: the rows of a tile and the positions staged at a
	// time.
	attendTileRows = 64
	attendTileKeys = 32
	// attendTileMin is the shortest run of a sequence's consecutive
	// positions that goes to the tiled kernel: below it the staging costs
	// more than the rows share.
	attendTileMin = 8
	// maxHeadDim bounds the head dimension of both kernels (a lane holds
	// eight of a row's values).
	maxHeadDim = 256
)

// attendTileSmem is nn_attend_mma's dynamic shared memory for head
// dimension hd: the tile's queries, the keys and values of attendTileKeys
// positions (rows padded against bank conflicts), and each of the four
// warps' 16×attendTileKeys weights.
func attendTileSmem(hd int) int {
	return 4 * (attendTileRows*(hd+4) + attendTileKeys*(hd+4) + attendTileKeys*(hd+8) + 4*16*(attendTileKeys+4))
}

// attendTileDims are the head dimensions nn_attend_mma is built for: a
// head of dimension hd (a multiple of 8) runs the first at least hd.
var attendTileDims = [...]int{64, 128, 256}

// attendTileKernel returns the index in attendTileDims of the kernel for
// head dimension hd, or -1 when hd is not a multiple of 8 (the per-row
// kernel takes every row).
func attendTileKernel(hd int) int {
	if hd%8 != 0 {
		return -1
	}
	for i, d := range attendTileDims {
		if hd <= d {
			return i
		}
	}
	return -1
}

// attendTiles splits a pass's attention rows (row i: sequence seqs[i] at
// position pos[i]): each run of at least attendTileMin rows of one
// sequence at consecutive positions becomes tiles {first row, rows,
// sequence, first position} of at most attendTileRows rows, appended to
// tiles; every other row's index is appended to rest.
func attendTiles(tiles, rest []int32, seqs, pos []int32) ([]int32, []int32) {
	for i := 0; i < len(seqs); {
		j := i + 1
		for j < len(seqs) && seqs[j] == seqs[i] && pos[j] == pos[j-1]+1 {
			j++
		}
		if j-i < attendTileMin {
			for r := i; r < j; r++ {
				rest = append(rest, int32(r))
			}
		} else {
			for r := i; r < j; r += attendTileRows {
				n := min(attendTileRows, j-r)
				tiles = append(tiles, int32(r), int32(n), seqs[r], pos[r])
			}
		}
		i = j
	}
	return tiles, rest
}
