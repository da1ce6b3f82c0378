package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"k8s.io/client-go/rest"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// errNotServed: the node-agent serves no live output of the run (it has
// not opened it yet, or the attempt has ended).
var errNotServed = errors.New("the node-agent serves no live output of this run now")

// liveClient is an HTTPS client for a node-agent's live-output server: the
// node-agent's certificate is pinned to the SHA-256 the run's status names
// (read from the API server over its own verified TLS), and the caller's own
// credentials of cfg authenticate it — a client certificate when the
// kubeconfig has one (then no bearer token is sent), else its bearer token
// (a token, a token file, an exec or auth plugin). Nothing goes over plain
// HTTP: status.liveOutput.url must be https.
func liveClient(cfg *rest.Config, lo *harnessv1.LiveOutput) (*http.Client, error) {
	u, err := url.Parse(lo.URL)
	if err != nil || u.Scheme != "https" {
		return nil, fmt.Errorf("status.liveOutput.url %q is not an https URL: refusing to send credentials to it", lo.URL)
	}
	want := strings.ToLower(lo.CertificateSHA256)
	c := rest.CopyConfig(cfg)
	// The node-agent's certificate is pinned, not checked against the
	// API server's CA; the client certificate (if any) stays.
	c.CAData, c.CAFile, c.ServerName = nil, "", ""
	c.Insecure = false
	if len(c.CertData) > 0 || c.CertFile != "" {
		c.BearerToken, c.BearerTokenFile = "", ""
	}
	tlsCfg, err := rest.TLSConfigFor(c)
	if err != nil {
		return nil, err
	}
	if tlsCfg == nil {
		tlsCfg = &tls.Config{}
	}
	tlsCfg.MinVersion = tls.VersionTLS12
	tlsCfg.RootCAs = nil
	// The certificate is pinned (VerifyConnection): a CA chain and a host
	// name are not what is checked.
	tlsCfg.InsecureSkipVerify = true //nolint:gosec // pinned by SHA-256 in VerifyConnection
	tlsCfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("the node-agent presented no certificate")
		}
		sum := sha256.Sum256(cs.PeerCertificates[0].Raw)
		if got := hex.EncodeToString(sum[:]); got != want {
			return fmt.Errorf("the node-agent's certificate has SHA-256 %s, but the run's status.liveOutput names %s: not connecting", got, want)
		}
		return nil
	}
	var rt http.RoundTripper = &http.Transport{TLSClientConfig: tlsCfg, Proxy: http.ProxyFromEnvironment,
		TLSHandshakeTimeout: 10 * time.Second, ResponseHeaderTimeout: 30 * time.Second}
	rt, err = rest.HTTPWrappersForConfig(c, rt)
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: rt}, nil
}

// readLive copies the run's live output from its node-agent to w: what it
// kept so far, and with follow everything until the agent ends. It returns
// errNotServed on 404, and the node-agent's words on a refusal.
func readLive(ctx context.Context, cfg *rest.Config, lo *harnessv1.LiveOutput, follow bool, w io.Writer) error {
	hc, err := liveClient(cfg, lo)
	if err != nil {
		return err
	}
	u := lo.URL
	if follow {
		u += "?follow=true"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("reaching the node-agent at %s: %w", lo.URL, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return errNotServed
	default:
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("the node-agent refused (%s): %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the live output: %w", err)
		}
	}
}
