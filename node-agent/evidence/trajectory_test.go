package evidence

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const sampleTrajectory = `{"schema_version":"ATIF-v1.4","session_id":"s","agent":{"name":"codex","version":"1"},"steps":[{"step_id":1,"source":"user","message":"hi"}]}` + "\n"

// TestTrajectoryIsASignedPart: trajectory.json is stored, named in the
// receipt by digest and a subject of the signed statement; a changed byte
// of it fails the check with its name, as does its absence.
func TestTrajectoryIsASignedPart(t *testing.T) {
	key, err := LoadOrCreateKey(filepath.Join(t.TempDir(), "keys", "evidence-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := SealParts(sampleReceipt(), Parts{Output: BytesLog("log\n"), Artifacts: sampleArtifacts(),
		Trajectory: []byte(sampleTrajectory), TrajectoryFormat: "ATIF-v1.4", TrajectorySteps: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if tr := b.Receipt.Trajectory; tr == nil || !tr.Stored || tr.Format != "ATIF-v1.4" || tr.Steps != 1 || tr.Size != int64(len(sampleTrajectory)) || tr.SHA256 != hexSum([]byte(sampleTrajectory)) {
		t.Fatalf("receipt's trajectory %+v", b.Receipt.Trajectory)
	}
	if err := b.Sign(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "ev")
	if err := b.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	if rep := verifyDir(t, dir, key.Public()); !rep.OK() {
		t.Fatalf("fresh evidence: %v", rep.Err())
	}
	env := readEnvelope(t, dir)
	payload, _ := base64.StdEncoding.DecodeString(env.Payload)
	if !strings.Contains(string(payload), `"name":"trajectory.json"`) {
		t.Errorf("the statement does not name trajectory.json: %s", payload)
	}
	// The ConfigMap form and back.
	data, bin := b.ConfigMapData()
	if data[TrajectoryName] != sampleTrajectory {
		t.Errorf("ConfigMap %s = %q", TrajectoryName, data[TrajectoryName])
	}
	if rep := VerifyConfigMap(data, bin, b.Digest, key.Public()); !rep.OK() {
		t.Errorf("ConfigMap: %v", rep.Err())
	}
	if back, err := FromConfigMap(data, bin); err != nil || string(back.Trajectory) != sampleTrajectory {
		t.Errorf("from the ConfigMap: %v", err)
	}
	if _, ok := b.Files()[TrajectoryName]; !ok {
		t.Error("the OCI artifact's files lack trajectory.json")
	}

	p := filepath.Join(dir, TrajectoryName)
	flipped := []byte(sampleTrajectory)
	flipped[20] ^= 1
	if err := os.WriteFile(p, flipped, 0o644); err != nil {
		t.Fatal(err)
	}
	rep := verifyDir(t, dir, key.Public())
	if rep.OK() || !strings.Contains(rep.Err().Error(), "trajectory.json: sha256 ") {
		t.Errorf("a flipped byte of trajectory.json: %v", rep.Err())
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if rep := verifyDir(t, dir, key.Public()); rep.OK() || !strings.Contains(rep.Err().Error(), "trajectory.json: missing") {
		t.Errorf("no trajectory.json: %v", rep.Err())
	}
}

// TestTrajectoryLeftOutBeforeArtifacts: over the bound, the trajectory is
// left out (digest kept) once the log is down to its minimum, before any
// artifact.
func TestTrajectoryLeftOutBeforeArtifacts(t *testing.T) {
	big := `{"pad":"` + strings.Repeat("t", 380<<10) + `"}`
	b, err := SealParts(sampleReceipt(), Parts{Output: BytesLog(strings.Repeat("x", 200<<10)), Artifacts: sampleArtifacts(),
		Trajectory: []byte(big), TrajectoryFormat: "ATIF-v1.4"}, 400<<10)
	if err != nil {
		t.Fatal(err)
	}
	if b.Trajectory != nil || b.Receipt.Trajectory == nil || b.Receipt.Trajectory.Stored || b.Receipt.Trajectory.SHA256 != hexSum([]byte(big)) {
		t.Fatalf("trajectory %+v stored %d bytes", b.Receipt.Trajectory, len(b.Trajectory))
	}
	for _, a := range b.Receipt.Artifacts {
		if a.Rejected == "" && !a.Stored {
			t.Errorf("artifact %s left out before the trajectory", a.Path)
		}
	}
	if !strings.Contains(strings.Join(b.Receipt.Dropped, "\n"), "trajectory.json: left out to fit") {
		t.Errorf("dropped %v", b.Receipt.Dropped)
	}
}
