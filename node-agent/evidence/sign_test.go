package evidence

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/secure-systems-lab/go-securesystemslib/dsse"

	"github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

func signedDir(t *testing.T) (string, *Key) {
	t.Helper()
	key, err := LoadOrCreateKey(filepath.Join(t.TempDir(), "keys", "evidence-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	b := seal(t, "edited greeting.txt\n", sampleArtifacts(), 0)
	if err := b.Sign(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "ev")
	if err := b.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	return dir, key
}

func verifyDir(t *testing.T, dir string, keys ...*PublicKey) *Report {
	t.Helper()
	rep, err := VerifyDir(dir, "", keys...)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestKeyIsKeptAcrossRestartsAndPrivate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys", "evidence-key.pem")
	k1, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if k1.Public().ID != k2.Public().ID || !strings.HasPrefix(k1.Public().ID, "sha256:") {
		t.Fatalf("key ids %s, %s: a restart must keep the key", k1.Public().ID, k2.Public().ID)
	}
	for p, want := range map[string]os.FileMode{path: 0o600, filepath.Dir(path): 0o700} {
		info, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm() != want {
			t.Errorf("%s has mode %v, want %v", p, info.Mode().Perm(), want)
		}
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateKey(path); err == nil || !strings.Contains(err.Error(), "0600") {
		t.Fatalf("a key others may read was accepted: %v", err)
	}
	pub, err := ParsePublicKeys([]byte("# node-1\n" + k1.Public().PEM + "# node-2\n" + k2.Public().PEM))
	if err != nil || len(pub) != 2 || pub[0].ID != k1.Public().ID {
		t.Fatalf("trusted keys %v, %v", pub, err)
	}
}

func TestSignedEvidenceVerifiesWithItsKey(t *testing.T) {
	dir, key := signedDir(t)
	rep := verifyDir(t, dir, key.Public())
	if !rep.OK() || !rep.Signed || !rep.SignatureChecked || rep.SignedBy != key.Public().ID {
		t.Fatalf("report %+v: %v", rep, rep.Err())
	}
	// The statement is an in-toto Statement v1 about output.log and the
	// stored artifacts, its predicate the receipt.
	env := readEnvelope(t, dir)
	payload, _ := base64.StdEncoding.DecodeString(env.Payload)
	var st struct {
		Type          string `json:"_type"`
		PredicateType string `json:"predicateType"`
		Subject       []struct {
			Name   string            `json:"name"`
			Digest map[string]string `json:"digest"`
		} `json:"subject"`
	}
	if err := json.Unmarshal(payload, &st); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range st.Subject {
		names = append(names, s.Name)
	}
	if st.Type != "https://in-toto.io/Statement/v1" || st.PredicateType != PredicateType ||
		strings.Join(names, ",") != "output.log,artifacts/greeting.txt,artifacts/out/token.txt,artifacts/bin.dat" ||
		env.PayloadType != PayloadType || env.Signatures[0].KeyID != key.Public().ID {
		t.Fatalf("statement %s in %+v", payload, env)
	}
	// Without a key, a signature is checked for consistency only, and the
	// report says it was not checked.
	if rep := verifyDir(t, dir); !rep.OK() || rep.SignatureChecked {
		t.Fatalf("without keys: %+v", rep)
	}
}

func readEnvelope(t *testing.T, dir string) dsse.Envelope {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, EnvelopeName))
	if err != nil {
		t.Fatal(err)
	}
	var env dsse.Envelope
	if err := json.Unmarshal(b, &env); err != nil {
		t.Fatal(err)
	}
	return env
}

func writeEnvelope(t *testing.T, dir string, env dsse.Envelope) {
	t.Helper()
	b, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, EnvelopeName), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Each kind of tampering fails, and the message names what was tampered
// with.
func TestTamperedSignedEvidenceFailsSayingWhich(t *testing.T) {
	other, err := LoadOrCreateKey(filepath.Join(t.TempDir(), "other.pem"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		tamper func(t *testing.T, dir string)
		key    func(own *Key) *PublicKey
		want   []string
	}{
		{name: "an artifact byte", tamper: func(t *testing.T, dir string) {
			flipFileByte(t, filepath.Join(dir, "artifacts", "greeting.txt"), 0)
		}, want: []string{"artifacts/greeting.txt: sha256"}},
		{name: "an output byte", tamper: func(t *testing.T, dir string) {
			flipFileByte(t, filepath.Join(dir, OutputName), 3)
		}, want: []string{"output.log: digest"}},
		{name: "a statement byte", tamper: func(t *testing.T, dir string) {
			env := readEnvelope(t, dir)
			payload, _ := base64.StdEncoding.DecodeString(env.Payload)
			i := strings.Index(string(payload), "node-1")
			payload[i+5] = '2' // node-2: the predicate is no longer the receipt
			env.Payload = base64.StdEncoding.EncodeToString(payload)
			writeEnvelope(t, dir, env)
		}, want: []string{partStatement + ": its predicate differs", partSignature + ": does not verify"}},
		{name: "a statement byte and the receipt to match", tamper: func(t *testing.T, dir string) {
			// The forger rewrites both consistently (and receipt.sha256):
			// only the signature can tell.
			env := readEnvelope(t, dir)
			payload, _ := base64.StdEncoding.DecodeString(env.Payload)
			env.Payload = base64.StdEncoding.EncodeToString([]byte(strings.Replace(string(payload), "node-1", "node-2", 1)))
			writeEnvelope(t, dir, env)
			raw, _ := os.ReadFile(filepath.Join(dir, ReceiptName))
			raw = []byte(strings.Replace(string(raw), `"node":"node-1"`, `"node":"node-2"`, 1))
			_ = os.WriteFile(filepath.Join(dir, ReceiptName), raw, 0o644)
			_ = os.WriteFile(filepath.Join(dir, DigestName), []byte(Sum(raw)+"\n"), 0o644)
		}, want: []string{partSignature + ": does not verify"}},
		{name: "a signature byte", tamper: func(t *testing.T, dir string) {
			env := readEnvelope(t, dir)
			sig, _ := base64.StdEncoding.DecodeString(env.Signatures[0].Sig)
			sig[len(sig)-1] ^= 1
			env.Signatures[0].Sig = base64.StdEncoding.EncodeToString(sig)
			writeEnvelope(t, dir, env)
		}, want: []string{partSignature + ": does not verify"}},
		{name: "a wrong key", key: func(*Key) *PublicKey { return other.Public() },
			want: []string{partSignature + ": signed by key", "not among the trusted keys"}},
		{name: "a missing signature", tamper: func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, EnvelopeName)); err != nil {
				t.Fatal(err)
			}
		}, want: []string{EnvelopeName + ": missing: the evidence is not signed"}},
		{name: "an envelope without signatures", tamper: func(t *testing.T, dir string) {
			env := readEnvelope(t, dir)
			env.Signatures = nil
			writeEnvelope(t, dir, env)
		}, want: []string{partSignature + ": missing"}},
		{name: "a re-signed forgery", tamper: func(t *testing.T, dir string) {
			// Signed by another key under the trusted key's ID.
			env := readEnvelope(t, dir)
			payload, _ := base64.StdEncoding.DecodeString(env.Payload)
			sig, _ := other.Sign(context.Background(), dsse.PAE(env.PayloadType, payload))
			env.Signatures[0].Sig = base64.StdEncoding.EncodeToString(sig)
			writeEnvelope(t, dir, env)
		}, want: []string{partSignature + ": does not verify"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir, key := signedDir(t)
			if tc.tamper != nil {
				tc.tamper(t, dir)
			}
			pub := key.Public()
			if tc.key != nil {
				pub = tc.key(key)
			}
			rep := verifyDir(t, dir, pub)
			err := rep.Err()
			if err == nil {
				t.Fatal("tampered evidence verified")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

func flipFileByte(t *testing.T, path string, i int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[i] ^= 1
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// The ConfigMap form carries the envelope too, and a run author who can
// write the ConfigMap but has no key cannot make it verify.
func TestSignedConfigMapVerifies(t *testing.T) {
	key, err := LoadOrCreateKey(filepath.Join(t.TempDir(), "k.pem"))
	if err != nil {
		t.Fatal(err)
	}
	b := seal(t, "out\n", sampleArtifacts(), 0)
	if err := b.Sign(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	data, bin := b.ConfigMapData()
	if rep := VerifyConfigMap(data, bin, b.Digest, key.Public()); !rep.OK() || rep.SignedBy != key.Public().ID {
		t.Fatalf("%+v: %v", rep, rep.Err())
	}
	back, err := FromConfigMap(data, bin)
	if err != nil || string(back.Envelope) != string(b.Envelope) {
		t.Fatalf("export lost the envelope: %v", err)
	}
	// Unsigned evidence with a key given fails.
	delete(data, EnvelopeName)
	if rep := VerifyConfigMap(data, bin, b.Digest, key.Public()); rep.OK() {
		t.Fatal("unsigned evidence verified against a key")
	}
}

// A trusted-keys entry bound to a node ("Node:" header) verifies only that
// node's receipts: a trusted node cannot sign for another.
func TestTrustedKeyBoundToItsNode(t *testing.T) {
	dir, key := signedDir(t) // the receipt says node-1
	bound := func(node string) *PublicKey {
		pem := strings.Replace(key.Public().PEM, "-----BEGIN PUBLIC KEY-----\n", "-----BEGIN PUBLIC KEY-----\nNode: "+node+"\n\n", 1)
		keys, err := ParsePublicKeys([]byte(pem))
		if err != nil || keys[0].Node != node {
			t.Fatalf("%v %v", keys, err)
		}
		return keys[0]
	}
	if rep := verifyDir(t, dir, bound("node-1")); !rep.OK() {
		t.Fatalf("its own node: %v", rep.Err())
	}
	rep := verifyDir(t, dir, bound("node-2"))
	if err := rep.Err(); err == nil || !strings.Contains(err.Error(), "signed by key "+key.Public().ID+" of node node-2, but the receipt says node node-1") {
		t.Fatalf("another node's receipt: %v", err)
	}
}

// Genuine evidence verifies whatever strings its receipt holds: a check's
// output that is not UTF-8 (an agent can put any byte in a file a check
// prints) or cut inside a character, a lone surrogate escape, control
// bytes. Before, such a receipt was sealed and signed but refused by its
// own verifier ("not in canonical form"), on a cluster and as a folder, and
// the controller would never store it. A count the signed statement cannot
// carry exactly is refused when sealing, not when verifying.
func TestSealedReceiptAlwaysVerifies(t *testing.T) {
	key, err := LoadOrCreateKey(filepath.Join(t.TempDir(), "keys", "evidence-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	code := int32(1)
	for _, msg := range []string{
		"exited with code 1: answer: caf\xe9",
		"exited with code 1: " + strings.Repeat("✓", 170)[1:], // cut inside the first character
		"\xff\xfe\x00\x1b[31m\u2028\ufffd",
		`\ud800 as text`,
	} {
		r := sampleReceipt()
		r.Checks = []v1alpha1.CheckResult{{Name: "shows-answer", ExitCode: &code, Message: msg}}
		r.Agent.CLIVersion = "1.0 \xc3" // what the CLI printed as its version
		b, err := SealLog(r, BytesLog("done\n"), sampleArtifacts(), 0)
		if err != nil {
			t.Fatalf("sealing a receipt with the message %q: %v", msg, err)
		}
		if err := b.Sign(context.Background(), key); err != nil {
			t.Fatal(err)
		}
		data, bin := b.ConfigMapData()
		if rep := VerifyConfigMap(data, bin, b.Digest, key.Public()); !rep.OK() {
			t.Errorf("message %q: the genuine evidence does not verify on a cluster: %v", msg, rep.Err())
		}
		dir := filepath.Join(t.TempDir(), "ev")
		if err := b.WriteDir(dir); err != nil {
			t.Fatal(err)
		}
		if rep := verifyDir(t, dir, key.Public()); !rep.OK() {
			t.Errorf("message %q: the genuine evidence does not verify as a folder: %v", msg, rep.Err())
		}
	}
	r := sampleReceipt()
	r.Usage = &v1alpha1.UsageStatus{Source: v1alpha1.UsageFromAgentOutput, InputTokens: 1<<53 + 1}
	if _, err := SealLog(r, BytesLog("done\n"), sampleArtifacts(), 0); err == nil || !strings.Contains(err.Error(), "would not verify") {
		t.Errorf("a receipt with 2^53+1 input tokens was sealed (%v): its statement would not verify", err)
	}
}
