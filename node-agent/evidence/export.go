package evidence

import (
	"fmt"
	"strings"
)

// FromConfigMap reads an evidence ConfigMap's data and binaryData back into
// a Bundle, so that WriteDir can export it as the folder `harnessfacts run`
// writes. It checks only the shape (a receipt that parses, the parts it
// names); VerifyConfigMap or VerifyDir judge the digests.
func FromConfigMap(data map[string]string, binaryData map[string][]byte) (*Bundle, error) {
	get := func(k string) ([]byte, bool) {
		if v, ok := data[k]; ok {
			return []byte(v), true
		}
		v, ok := binaryData[k]
		return v, ok
	}
	receiptJSON, ok := get(ReceiptName)
	if !ok {
		return nil, fmt.Errorf("the evidence has no %s", ReceiptName)
	}
	r, err := parseReceipt(receiptJSON)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ReceiptName, err)
	}
	digest, _ := get(DigestName)
	output, _ := get(OutputName)
	b := &Bundle{Receipt: *r, ReceiptJSON: receiptJSON, Digest: strings.TrimSpace(string(digest)), Output: output,
		Artifacts: map[string][]byte{}}
	if env, ok := get(EnvelopeName); ok {
		b.Envelope = env
	}
	if r.Trajectory != nil && r.Trajectory.Stored {
		tr, ok := get(TrajectoryName)
		if !ok {
			return nil, fmt.Errorf("the evidence lacks %s", TrajectoryName)
		}
		b.Trajectory = tr
	}
	for i, a := range r.Artifacts {
		if !a.Stored {
			continue
		}
		if !validRel(a.Path) {
			return nil, fmt.Errorf("artifact path %q is not a clean relative path", a.Path)
		}
		content, ok := get(artifactKey(i))
		if !ok {
			return nil, fmt.Errorf("the evidence lacks %s (artifact %s)", artifactKey(i), a.Path)
		}
		b.Artifacts[a.Path] = content
	}
	return b, nil
}
