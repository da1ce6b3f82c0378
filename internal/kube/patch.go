package kube

import (
	"encoding/json"
	"fmt"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
)

// Patch is a JSON merge patch (RFC 7386) from a base to the object it is
// sent with.
type Patch struct {
	base Object
	lock bool
}

// MergeFrom patches the fields in which the object differs from base.
func MergeFrom(base Object) Patch { return Patch{base: base} }

// MergeFromWithLock is MergeFrom carrying the object's resourceVersion:
// the API server refuses it with a Conflict if the object changed since it
// was read, as an Update would.
func MergeFromWithLock(base Object) Patch { return Patch{base: base, lock: true} }

// Data is the patch from the base to obj.
func (p Patch) Data(obj Object) ([]byte, error) {
	from, err := json.Marshal(p.base)
	if err != nil {
		return nil, err
	}
	to, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	data, err := jsonpatch.CreateMergePatch(from, to)
	if err != nil {
		return nil, fmt.Errorf("a merge patch: %w", err)
	}
	if !p.lock {
		return data, nil
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	md, _ := m["metadata"].(map[string]any)
	if md == nil {
		md = map[string]any{}
		m["metadata"] = md
	}
	md["resourceVersion"] = obj.GetResourceVersion()
	return json.Marshal(m)
}
