package numeric

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestFormatString(t *testing.T) {
	tests := []struct {
		f    Format
		want string
	}{
		{F32, "fp32"}, {F16, "fp16"}, {BF16, "bf16"}, {E4M3, "fp8-e4m3"},
		{E5M2, "fp8-e5m2"}, {NVFP4, "nvfp4"}, {Format(42), "Format(42)"},
	}
	for _, tt := range tests {
		if got := tt.f.String(); got != tt.want {
			t.Errorf("Format(%d).String() = %q, want %q", uint8(tt.f), got, tt.want)
		}
	}
}

func TestParseFormat(t *testing.T) {
	tests := []struct {
		in      string
		want    Format
		wantErr bool
	}{
		{"fp32", F32, false}, {"f32", F32, false}, {"float32", F32, false}, {"FP32", F32, false},
		{"fp16", F16, false}, {"float16", F16, false}, {"f16", F16, false}, {"half", F16, false},
		{"bf16", BF16, false}, {"bfloat16", BF16, false}, {"BFloat16", BF16, false},
		{"fp8-e4m3", E4M3, false}, {"fp8", E4M3, false}, {"e4m3", E4M3, false}, {"e4m3fn", E4M3, false},
		{"fp8-e5m2", E5M2, false}, {"e5m2", E5M2, false},
		{"nvfp4", NVFP4, false}, {"NVFP4", NVFP4, false},
		{"", 0, true}, {"fp4", 0, true}, {"fp8-e3m4", 0, true}, {" fp16", 0, true}, {"int8", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseFormat(tt.in)
		if tt.wantErr {
			if !errors.Is(err, ErrUnknownFormat) {
				t.Errorf("ParseFormat(%q) error = %v, want ErrUnknownFormat", tt.in, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseFormat(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

// TestBitsPerElement checks the storage costs, NVFP4's against the byte
// count its codec actually uses.
func TestBitsPerElement(t *testing.T) {
	tests := []struct {
		f    Format
		want float64
	}{
		{F32, 32}, {F16, 16}, {BF16, 16}, {E4M3, 8}, {E5M2, 8}, {NVFP4, 4.5}, {Format(200), 0},
	}
	for _, tt := range tests {
		if got := tt.f.BitsPerElement(); got != tt.want {
			t.Errorf("%v.BitsPerElement() = %g, want %g", tt.f, got, tt.want)
		}
	}
	const n = 1 << 16
	if got := float64(8*NVFP4Bytes(n)) / n; got != NVFP4.BitsPerElement() {
		t.Errorf("NVFP4 codec uses %g bits per element, BitsPerElement says %g", got, NVFP4.BitsPerElement())
	}
}

func TestFormatJSON(t *testing.T) {
	type config struct{ Checkpoint, ReadCopy Format }
	in := config{Checkpoint: E4M3, ReadCopy: NVFP4}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"Checkpoint":"fp8-e4m3","ReadCopy":"nvfp4"}`; string(b) != want {
		t.Errorf("json = %s, want %s", b, want)
	}
	var out config
	if err := json.Unmarshal([]byte(`{"Checkpoint":"fp8","ReadCopy":"bfloat16"}`), &out); err != nil {
		t.Fatal(err)
	}
	if out != (config{E4M3, BF16}) {
		t.Errorf("unmarshal gave %+v", out)
	}
	if err := json.Unmarshal([]byte(`{"Checkpoint":"fp7"}`), &out); !errors.Is(err, ErrUnknownFormat) {
		t.Errorf("unmarshal of an unknown name: error %v, want ErrUnknownFormat", err)
	}
	if _, err := Format(9).MarshalText(); !errors.Is(err, ErrUnknownFormat) {
		t.Errorf("marshal of Format(9): error %v, want ErrUnknownFormat", err)
	}
}

// FuzzParseFormat checks that ParseFormat either returns a format whose
// canonical name parses back to it, or an ErrUnknownFormat naming the input.
func FuzzParseFormat(f *testing.F) {
	for _, s := range []string{"fp32", "fp8", "FP8-E5M2", "nvfp4", "bf16 ", "", "e4m3\x00", "ｆｐ16"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseFormat(s)
		if err != nil {
			if !errors.Is(err, ErrUnknownFormat) {
				t.Fatalf("ParseFormat(%q): error %v does not wrap ErrUnknownFormat", s, err)
			}
			return
		}
		name := got.String()
		if strings.HasPrefix(name, "Format(") {
			t.Fatalf("ParseFormat(%q) = %v, not a known format", s, got)
		}
		if back, err := ParseFormat(name); err != nil || back != got {
			t.Fatalf("ParseFormat(%q) = %v, but its name %q parses to %v, %v", s, got, name, back, err)
		}
	})
}
