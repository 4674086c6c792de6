package client_test

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"testing"

	"github.com/idemhq/idem/client"
)

// TestFingerprintVectors checks the committed vectors, which were computed
// independently with Node.js (JSON.parse, then JSON.stringify with sorted
// keys), the way a worker in another language will compute them.
func TestFingerprintVectors(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("testdata/fingerprint_vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Vectors []struct {
			Name      string `json:"name"`
			Input     string `json:"input"`
			Canonical string `json:"canonical"`
			SHA256    string `json:"sha256"`
		} `json:"vectors"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Vectors) == 0 {
		t.Fatal("no vectors")
	}
	for _, v := range file.Vectors {
		canon, err := client.CanonicalJSON(json.RawMessage(v.Input))
		if err != nil {
			t.Errorf("%s: %v", v.Name, err)
			continue
		}
		if string(canon) != v.Canonical {
			t.Errorf("%s: canonical form\n got %q\nwant %q", v.Name, canon, v.Canonical)
		}
		fp, err := client.FingerprintJSON(json.RawMessage(v.Input))
		if err != nil || hex.EncodeToString(fp) != v.SHA256 {
			t.Errorf("%s: fingerprint %x, %v; want %s", v.Name, fp, err, v.SHA256)
		}
	}
}

// TestFingerprintJSONOfGoValues: a struct, a map and JSON text of the same
// payload fingerprint alike.
func TestFingerprintJSONOfGoValues(t *testing.T) {
	t.Parallel()
	type item struct {
		SKU string `json:"sku"`
		Qty int    `json:"qty"`
	}
	type order struct {
		ID    string  `json:"id"`
		Total float64 `json:"total"`
		Items []item  `json:"items"`
		Note  string  `json:"note"`
	}
	fromStruct, err := client.FingerprintJSON(order{ID: "o-1", Total: 12.5, Items: []item{{"x", 2}}, Note: "<fragile> & \u2028"})
	if err != nil {
		t.Fatal(err)
	}
	fromMap, err := client.FingerprintJSON(map[string]any{"note": "<fragile> & \u2028", "items": []any{map[string]any{"qty": 2, "sku": "x"}}, "total": 12.50, "id": "o-1"})
	if err != nil {
		t.Fatal(err)
	}
	fromText, err := client.FingerprintJSON(json.RawMessage(`{ "total": 1.25e1, "id": "o-1", "items": [{"sku": "x", "qty": 2.0}], "note": "\u003cfragile> \u0026 \u2028" }`))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fromStruct, fromMap) || !bytes.Equal(fromStruct, fromText) {
		t.Errorf("fingerprints differ: struct %x, map %x, text %x", fromStruct, fromMap, fromText)
	}
	if _, err := client.FingerprintJSON(json.RawMessage(`[1e400]`)); err == nil {
		t.Error("a number beyond a double's range was accepted")
	}
}

func TestFingerprint(t *testing.T) {
	t.Parallel()
	const abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" // SHA-256("abc"), FIPS 180-2
	if got := hex.EncodeToString(client.Fingerprint([]byte("abc"))); got != abc {
		t.Errorf("Fingerprint(abc) = %s, want %s", got, abc)
	}
}
