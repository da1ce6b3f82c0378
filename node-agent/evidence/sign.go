package evidence

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	ita1 "github.com/in-toto/attestation/go/v1"
	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

// The signed form of a receipt: an in-toto Statement v1 whose subjects are
// the stored output log and artifacts (by sha256) and whose predicate is
// the receipt, in a DSSE envelope signed with the node's key.
const (
	// EnvelopeName is the DSSE envelope's file and ConfigMap key.
	EnvelopeName = "receipt.dsse.json"
	// PredicateType is the statement's predicateType: the receipt format.
	PredicateType = "https://harnessfacts.io/receipt/v1"
	// PayloadType is DSSE's payloadType of an in-toto statement.
	PayloadType = "application/vnd.in-toto+json"
	// envelopeRoom is what an envelope needs beyond its base64 statement
	// (field names, one signature of at most 72 bytes as base64, the key ID).
	envelopeRoom = 512
)

// subjects are the statement's subjects: output.log, trajectory.json when
// stored and every stored artifact, by the names they have in an evidence folder.
func subjects(r *Receipt) []*ita1.ResourceDescriptor {
	out := []*ita1.ResourceDescriptor{{Name: OutputName,
		Digest: map[string]string{"sha256": strings.TrimPrefix(r.Output.StoredDigest, "sha256:")}}}
	if t := r.Trajectory; t != nil && t.Stored {
		out = append(out, &ita1.ResourceDescriptor{Name: TrajectoryName, Digest: map[string]string{"sha256": t.SHA256}})
	}
	for _, a := range r.Artifacts {
		if a.Stored {
			out = append(out, &ita1.ResourceDescriptor{Name: ArtifactsDir + "/" + a.Path,
				Digest: map[string]string{"sha256": a.SHA256}})
		}
	}
	return out
}

// statement is the in-toto statement of a sealed receipt (raw: its
// canonical bytes).
func statement(r *Receipt, raw []byte) ([]byte, error) {
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	pred, err := structpb.NewStruct(m)
	if err != nil {
		return nil, fmt.Errorf("the receipt as a predicate: %w", err)
	}
	st := &ita1.Statement{Type: ita1.StatementTypeUri, Subject: subjects(r), PredicateType: PredicateType, Predicate: pred}
	if err := st.Validate(); err != nil {
		return nil, fmt.Errorf("in-toto statement: %w", err)
	}
	return protojson.Marshal(st)
}

// Sign wraps the bundle's statement in a DSSE envelope signed with key;
// the envelope becomes part of the evidence (EnvelopeName).
func (b *Bundle) Sign(ctx context.Context, key *Key) error {
	if b.Statement == nil {
		return errors.New("the bundle has no statement: seal it first")
	}
	signer, err := dsse.NewEnvelopeSigner(key)
	if err != nil {
		return err
	}
	env, err := signer.SignPayload(ctx, PayloadType, b.Statement)
	if err != nil {
		return fmt.Errorf("signing the receipt: %w", err)
	}
	if b.Envelope, err = json.Marshal(env); err != nil {
		return err
	}
	return nil
}

// Signature parts named in a Report's problems.
const (
	partStatement = EnvelopeName + " (statement)"
	partSignature = EnvelopeName + " (signature)"
)

// checkEnvelope checks the envelope of the evidence in s, when there is
// one: its statement must be the receipt (raw) and name the stored parts
// by their digests, and, when keys are given, one of them must have signed
// it. With keys, an unsigned evidence is a problem.
func checkEnvelope(ctx context.Context, rep *Report, s store, r *Receipt, raw []byte, keys []*PublicKey) {
	envJSON, ok, err := s.get(EnvelopeName, MaxConfigMapBytes)
	switch {
	case err != nil:
		rep.add(EnvelopeName, "%v", err)
		return
	case !ok && len(keys) > 0:
		rep.add(EnvelopeName, "missing: the evidence is not signed")
		return
	case !ok:
		return
	}
	rep.Signed = true
	var env dsse.Envelope
	dec := json.NewDecoder(bytes.NewReader(envJSON))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&env); err != nil {
		rep.add(EnvelopeName, "not a DSSE envelope: %v", err)
		return
	}
	if env.PayloadType != PayloadType {
		rep.add(EnvelopeName, "payloadType %q, want %q", env.PayloadType, PayloadType)
		return
	}
	payload, err := base64.StdEncoding.DecodeString(env.Payload)
	if err != nil {
		rep.add(partStatement, "the payload is not base64: %v", err)
	} else {
		checkStatement(rep, payload, r, raw)
	}
	if len(env.Signatures) == 0 {
		rep.add(partSignature, "missing: the envelope carries no signature")
		return
	}
	if len(keys) == 0 {
		return // nothing to check it against; the report says so
	}
	rep.SignatureChecked = true
	// Only a signature by a trusted key counts; which keys signed is said
	// when none of them is trusted.
	var tried []string
	for _, sig := range env.Signatures {
		for _, k := range keys {
			if sig.KeyID != "" && sig.KeyID != k.ID {
				continue
			}
			tried = append(tried, k.ID)
			v, err := dsse.NewEnvelopeVerifier(k)
			if err != nil {
				rep.add(partSignature, "%v", err)
				return
			}
			one := env
			one.Signatures = []dsse.Signature{sig}
			if _, err := v.Verify(ctx, &one); err == nil {
				if k.Node != "" && k.Node != r.Node {
					// A trusted node's key, signing for another node.
					rep.add(partSignature, "signed by key %s of node %s, but the receipt says node %s", k.ID, k.Node, r.Node)
					return
				}
				rep.SignedBy = k.ID
				return
			}
		}
	}
	if len(tried) == 0 {
		signers := make([]string, len(env.Signatures))
		for i, s := range env.Signatures {
			signers[i] = s.KeyID
		}
		rep.add(partSignature, "signed by key %s, which is not among the trusted keys (%s)", strings.Join(signers, ", "), keyIDs(keys))
		return
	}
	rep.add(partSignature, "does not verify with key %s: the signature or the signed statement was altered", strings.Join(tried, ", "))
}

// checkStatement checks that the signed statement is the receipt's: its
// predicate is the receipt and its subjects are the stored parts.
func checkStatement(rep *Report, payload []byte, r *Receipt, raw []byte) {
	var st ita1.Statement
	if err := protojson.Unmarshal(payload, &st); err != nil {
		rep.add(partStatement, "not an in-toto statement: %v", err)
		return
	}
	if err := st.Validate(); err != nil {
		rep.add(partStatement, "not a valid in-toto statement: %v", err)
		return
	}
	if st.GetType() != ita1.StatementTypeUri || st.GetPredicateType() != PredicateType {
		rep.add(partStatement, "type %q with predicateType %q, want %q with %q", st.GetType(), st.GetPredicateType(), ita1.StatementTypeUri, PredicateType)
		return
	}
	predJSON, err := protojson.Marshal(st.GetPredicate())
	if err != nil {
		rep.add(partStatement, "%v", err)
		return
	}
	dec := json.NewDecoder(bytes.NewReader(predJSON))
	dec.DisallowUnknownFields()
	var pred Receipt
	if err := dec.Decode(&pred); err != nil {
		rep.add(partStatement, "its predicate is not a receipt: %v", err)
		return
	}
	if c, err := pred.Canonical(); err != nil || !bytes.Equal(c, raw) {
		rep.add(partStatement, "its predicate differs from %s (the statement or the receipt was altered)", ReceiptName)
	}
	want := map[string]string{}
	for _, s := range subjects(r) {
		want[s.GetName()] = s.GetDigest()["sha256"]
	}
	for _, s := range st.GetSubject() {
		d, ok := want[s.GetName()]
		switch {
		case !ok:
			rep.add(partStatement, "subject %s is not a stored part of the evidence", s.GetName())
		case s.GetDigest()["sha256"] != d:
			rep.add(partStatement, "subject %s has sha256 %s, the receipt says %s", s.GetName(), s.GetDigest()["sha256"], d)
		}
		delete(want, s.GetName())
	}
	for _, name := range sortedKeys(want) {
		rep.add(partStatement, "does not name %s, a stored part", name)
	}
}
