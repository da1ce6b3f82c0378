package evidence

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/harnessfacts/harnessfacts/internal/trustedpath"
)

// Algorithm names the one signature scheme of receipts: ECDSA on P-256 over
// the SHA-256 of DSSE's pre-authentication encoding, the signature ASN.1
// DER. It is the key type cosign makes and verifies by default, so
// Sigstore's tools can check a receipt with the published PEM key.
const Algorithm = "ECDSA-P256-SHA256"

// Key is a node's evidence signing key.
type Key struct {
	priv *ecdsa.PrivateKey
	pub  *PublicKey
}

// PublicKey is a public key that can verify receipts.
type PublicKey struct {
	key *ecdsa.PublicKey
	// ID is "sha256:<hex>" of the key's DER SubjectPublicKeyInfo, which
	// `openssl pkey -pubin -outform DER | sha256sum` computes too.
	ID string
	// PEM is the PKIX "PUBLIC KEY" PEM block.
	PEM string
	// Node, when the trusted-keys file says it (a "Node: NAME" header of
	// the PEM block), is the one node this key may sign for.
	Node string
}

// Public is the key's public part.
func (k *Key) Public() *PublicKey { return k.pub }

// LoadOrCreateKey reads the PKCS#8 PEM ECDSA P-256 private key at path, or,
// when there is none, makes one and writes it there (mode 0600, its folder
// 0700), so that a restarted node-agent keeps its key. A key file anyone
// but its owner may read is refused: it would no longer vouch for anything.
// So is anything at path that is not a regular file (a FIFO would hold the
// process at its start, a link to a device would have it read without end)
// and a file larger than any key: the default paths may sit in a folder
// another user of the machine made first (harnessfacts dev's is in the
// temporary folder).
func LoadOrCreateKey(path string) (*Key, error) {
	// Nor may another user be able to put their key in its place: the
	// key, its folder and the folders above it must be this process's
	// user's or root's, and none may be written by anyone unless sticky.
	if err := trustedpath.Check(path, "the evidence key"); err != nil {
		return nil, fmt.Errorf("evidence key: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|keyOpenFlags, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return createKey(path)
	}
	if err != nil {
		return nil, fmt.Errorf("evidence key: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("evidence key: %w", err)
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("evidence key %s: not a regular file (%v)", path, info.Mode().Type())
	}
	if info.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("evidence key %s: mode %v lets others read it; it must be 0600", path, info.Mode().Perm())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("evidence key: %w", err)
	}
	if len(b) > maxKeyFileBytes {
		return nil, fmt.Errorf("evidence key %s: larger than %d bytes, which no PEM key is", path, maxKeyFileBytes)
	}
	return ParsePrivateKey(b)
}

// maxKeyFileBytes bounds what LoadOrCreateKey reads: a PEM P-256 key is
// about 250 bytes, with comments and a certificate beside it a few KiB.
const maxKeyFileBytes = 64 << 10

func createKey(path string) (*Key, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("evidence key: %w", err)
	}
	if err := trustedpath.Check(path, "the evidence key"); err != nil {
		return nil, fmt.Errorf("evidence key: %w", err)
	}
	// trustedpath refuses a folder anyone may write to; a new key's own
	// folder may not be its group's to write either (they could replace
	// the key after it is made), unless sticky, as the temporary folder is.
	if info, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("evidence key: %w", err)
	} else if info.Mode().Perm()&0o020 != 0 && info.Mode()&fs.ModeSticky == 0 {
		return nil, fmt.Errorf("evidence key: the folder %s may be written by its group (mode %v), who could replace the key; make it 0700 or name another with --evidence-key", dir, info.Mode().Perm())
	}
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("evidence key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, err
	}
	data := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	// Written under a temporary name and linked into place: a key file is
	// never seen half written, and two processes never both win.
	tmp, err := os.CreateTemp(dir, ".evidence-key-*")
	if err != nil {
		return nil, fmt.Errorf("evidence key: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if err := tmp.Chmod(0o600); err != nil {
		_ = tmp.Close()
		return nil, err
	}
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return nil, err
	}
	if err := errors.Join(tmp.Sync(), tmp.Close()); err != nil {
		return nil, err
	}
	if err := os.Link(tmp.Name(), path); errors.Is(err, fs.ErrExist) {
		return LoadOrCreateKey(path)
	} else if err != nil {
		return nil, fmt.Errorf("evidence key: %w", err)
	}
	return newKey(priv)
}

// ParsePrivateKey reads a PKCS#8 (or SEC 1 "EC PRIVATE KEY") PEM ECDSA
// P-256 private key.
func ParsePrivateKey(b []byte) (*Key, error) {
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, errors.New("evidence key: no PEM block")
	}
	var key any
	var err error
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("evidence key: a PEM %q block, want PRIVATE KEY", block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("evidence key: %w", err)
	}
	priv, ok := key.(*ecdsa.PrivateKey)
	if !ok || priv.Curve != elliptic.P256() {
		return nil, fmt.Errorf("evidence key: a %T, want an ECDSA P-256 key", key)
	}
	return newKey(priv)
}

func newKey(priv *ecdsa.PrivateKey) (*Key, error) {
	pub, err := publicKey(&priv.PublicKey)
	if err != nil {
		return nil, err
	}
	return &Key{priv: priv, pub: pub}, nil
}

func publicKey(k *ecdsa.PublicKey) (*PublicKey, error) {
	der, err := x509.MarshalPKIXPublicKey(k)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(der)
	return &PublicKey{key: k, ID: "sha256:" + hex.EncodeToString(sum[:]),
		PEM: string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))}, nil
}

// ParsePublicKeys reads every PEM "PUBLIC KEY" block of b: one key (--key)
// or a trusted-keys file of several. A block's "Node: NAME" header binds
// the key to that node: it then verifies only receipts of that node. Other
// PEM blocks and text between blocks (comments) are skipped; a key that is not ECDSA P-256 is an error,
// as is a file with no key at all.
func ParsePublicKeys(b []byte) ([]*PublicKey, error) {
	var keys []*PublicKey
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if block.Type != "PUBLIC KEY" {
			continue
		}
		k, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("public key %d: %w", len(keys)+1, err)
		}
		ek, ok := k.(*ecdsa.PublicKey)
		if !ok || ek.Curve != elliptic.P256() {
			return nil, fmt.Errorf("public key %d: a %T, want an ECDSA P-256 key (%s)", len(keys)+1, k, Algorithm)
		}
		pk, err := publicKey(ek)
		if err != nil {
			return nil, err
		}
		pk.Node = block.Headers["Node"]
		keys = append(keys, pk)
	}
	if len(keys) == 0 {
		return nil, errors.New("no PEM PUBLIC KEY block")
	}
	return keys, nil
}

// ReadPublicKeys is ParsePublicKeys of a file.
func ReadPublicKeys(path string) ([]*PublicKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	keys, err := ParsePublicKeys(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return keys, nil
}

// The DSSE signer and verifier interfaces (go-securesystemslib/dsse).

// Sign signs data (DSSE's PAE) with ECDSA over its SHA-256.
func (k *Key) Sign(_ context.Context, data []byte) ([]byte, error) {
	sum := sha256.Sum256(data)
	return ecdsa.SignASN1(rand.Reader, k.priv, sum[:])
}

// KeyID is the public key's ID.
func (k *Key) KeyID() (string, error) { return k.pub.ID, nil }

// Verify checks an ASN.1 ECDSA signature over data's SHA-256.
func (p *PublicKey) Verify(_ context.Context, data, sig []byte) error {
	sum := sha256.Sum256(data)
	if !ecdsa.VerifyASN1(p.key, sum[:], sig) {
		return errors.New("ecdsa: the signature does not verify")
	}
	return nil
}

// KeyID is the key's ID.
func (p *PublicKey) KeyID() (string, error) { return p.ID, nil }

// Public is the crypto public key.
func (p *PublicKey) Public() crypto.PublicKey { return p.key }

// keyIDs lists the IDs of keys, for messages.
func keyIDs(keys []*PublicKey) string {
	ids := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = k.ID
	}
	return strings.Join(ids, ", ")
}
