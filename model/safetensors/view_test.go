package safetensors

import (
	"bytes"
	"errors"
	"testing"
	"unsafe"
)

// TestViews: BF16 and F32 give a tensor's elements in place, check shape
// and dtype, and refuse other dtypes.
func TestViews(t *testing.T) {
	var buf bytes.Buffer
	err := Write(&buf, []Tensor{
		{Name: "b", DType: BF16, Shape: []int{2, 2}, Data: []byte{0x80, 0x3f, 0x00, 0xc0, 0x40, 0x40, 0x00, 0x00}}, // 1, -2, 3, 0
		{Name: "f", DType: F32, Shape: []int{2}, Data: []byte{0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0}},                    // 1, -2
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := FromBytes("views", buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.BF16("b", 2, -1)
	if err != nil || len(b) != 4 || b[0] != 0x3f80 || b[1] != 0xc000 || b[2] != 0x4040 {
		t.Fatalf("BF16 = %x, %v", b, err)
	}
	raw, _ := f.Bytes("b")
	if unsafe.Pointer(&b[0]) != unsafe.Pointer(&raw[0]) {
		t.Error("BF16 copied an aligned tensor")
	}
	if v, err := f.F32("f", 2); err != nil || len(v) != 2 || v[0] != 1 || v[1] != -2 {
		t.Fatalf("F32 = %v, %v", v, err)
	}
	if _, err := f.BF16("b", 4); err == nil {
		t.Error("BF16 accepted a wrong shape")
	}
	if _, err := f.F32("b"); !errors.Is(err, ErrDType) {
		t.Errorf("F32 of a BF16 tensor: %v, want ErrDType", err)
	}
}
