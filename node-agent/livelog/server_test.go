package livelog

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/kube"
	"github.com/harnessfacts/harnessfacts/internal/kubeauth"
)

// reviews stands in for the API server's TokenReview and
// SubjectAccessReview (the e2e tests use the real ones; here the server's
// own bounds are under test): the token "mallory" is user mallory, allowed
// the log of every run in namespace tenant-a only; "alice" is user alice,
// allowed namespace tenant-b only.
func reviews(t *testing.T) kubeauth.Creator { return slowReviews(t, nil) }

// fakeReviews is a kubeauth.Creator answering reviews itself.
type fakeReviews func(ctx context.Context, obj kube.Object) error

func (f fakeReviews) Create(ctx context.Context, obj kube.Object) error { return f(ctx, obj) }

// slowReviews is reviews, where the tokens "sa-N" are ServiceAccounts of
// tenant-a, and a made-up token "fake-…" waits for slow to close before it
// is refused (an API server slow to answer).
func slowReviews(t *testing.T, slow chan struct{}) kubeauth.Creator {
	t.Helper()
	var mu sync.Mutex
	home := map[string]string{"mallory": "tenant-a", "alice": "tenant-b"}
	return fakeReviews(func(_ context.Context, obj kube.Object) error {
		if o, ok := obj.(*authenticationv1.TokenReview); ok && strings.HasPrefix(o.Spec.Token, "fake-") && slow != nil {
			<-slow
		}
		mu.Lock()
		defer mu.Unlock()
		switch o := obj.(type) {
		case *authenticationv1.TokenReview:
			if strings.HasPrefix(o.Spec.Token, "sa-") {
				home[o.Spec.Token] = "tenant-a"
			}
			if _, ok := home[o.Spec.Token]; ok {
				o.Status.Authenticated = true
				o.Status.User = authenticationv1.UserInfo{Username: o.Spec.Token, Groups: []string{"system:authenticated"}}
			}
		case *authorizationv1.SubjectAccessReview:
			ra := o.Spec.ResourceAttributes
			o.Status.Allowed = ra != nil && home[o.Spec.User] == ra.Namespace && ra.Subresource == "log"
		default:
			return fmt.Errorf("the live-output server created a %T", obj)
		}
		return nil
	})
}

func serve(t *testing.T, hub *Hub, writeTimeout time.Duration) *Listening {
	return serveWith(t, hub, writeTimeout, reviews(t))
}

func serveWith(t *testing.T, hub *Hub, writeTimeout time.Duration, api kubeauth.Creator) *Listening {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	l, err := Listen(ctx, hub, Config{BindAddress: "127.0.0.1:0", AdvertiseHost: "127.0.0.1", Reviews: api})
	if err != nil {
		t.Fatal(err)
	}
	l.Server.WriteTimeout = writeTimeout
	go func() { _ = l.Server.Serve(ctx, l.Listener) }()
	return l
}

// stalledFollow sends a follow request as token and reads only the answer's
// head, never its body, with a small receive window: a `logs -f | less` left
// open. It returns the status.
func stalledFollow(t *testing.T, addr, path, token string) (net.Conn, int) {
	t.Helper()
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = raw.(*net.TCPConn).SetReadBuffer(2048)
	c := tls.Client(raw, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the test's own server
	t.Cleanup(func() { _ = c.Close() })
	if _, err := fmt.Fprintf(c, "GET %s?follow=true HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", path, token); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(c, 512), nil)
	if err != nil {
		t.Fatal(err)
	}
	return c, resp.StatusCode
}

func get(t *testing.T, l *Listening, path, token string) (int, string) {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the test's own server
	req, _ := http.NewRequest(http.MethodGet, l.BaseURL+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// One user following their own runs with followers that never read (8 runs,
// 8 followers each: every stream slot of the node) holds at most MaxPerUser
// of them, and a user of another namespace still follows her own run.
// (Before, the slots were taken before the caller was even known, and each
// stalled follower held its slot for as long as its connection lived.)
func TestOneUserCannotTakeEveryStream(t *testing.T) {
	hub := NewHub()
	l := serve(t, hub, 0)
	var mine []*Stream
	for i := range MaxConnections / MaxFollowers {
		mine = append(mine, hub.OpenStream(&harnessv1.HarnessRun{ObjectMeta: metav1.ObjectMeta{
			Namespace: "tenant-a", Name: fmt.Sprintf("run-%d", i), UID: types.UID(fmt.Sprint("a", i))}}))
	}
	victim := hub.OpenStream(&harnessv1.HarnessRun{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-b", Name: "victim", UID: "b"}})
	_, _ = victim.Write([]byte("alice's output\n"))
	accepted := 0
	for i := range MaxConnections {
		if _, status := stalledFollow(t, l.Listener.Addr().String(), Path("tenant-a", fmt.Sprintf("run-%d", i/MaxFollowers)), "mallory"); status == http.StatusOK {
			accepted++
		} else if status != http.StatusTooManyRequests {
			t.Fatalf("follower %d: status %d, want 200 or 429", i, status)
		}
	}
	if accepted != MaxPerUser {
		t.Errorf("one user's followers were accepted %d times, want %d", accepted, MaxPerUser)
	}
	chunk := []byte(strings.Repeat("x", 32<<10) + "\n")
	for range 100 {
		for _, s := range mine {
			_, _ = s.Write(chunk)
		}
	}
	if status, body := get(t, l, Path("tenant-b", "victim"), "alice"); status != http.StatusOK || !strings.Contains(body, "alice's output") {
		t.Errorf("alice, allowed to read tenant-b/victim, got %d %q beside another user's stalled followers", status, strings.TrimSpace(body))
	}
}

// A follower that stopped reading is cut off once a write has waited
// WriteTimeout, and gives its slot back: the same user can follow again.
func TestFollowerThatStopsReadingIsCutOff(t *testing.T) {
	hub := NewHub()
	l := serve(t, hub, 500*time.Millisecond)
	run := hub.OpenStream(&harnessv1.HarnessRun{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", Name: "chatty", UID: "a"}})
	defer run.Close()
	for i := range MaxPerUser {
		if _, status := stalledFollow(t, l.Listener.Addr().String(), Path("tenant-a", "chatty"), "mallory"); status != http.StatusOK && i < MaxFollowersPerUser {
			t.Fatalf("follower %d: status %d", i, status)
		}
	}
	chunk := []byte(strings.Repeat("x", 32<<10) + "\n")
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, _ = run.Write(chunk) // fills the stalled followers' windows and buffers
		l.Server.mu.Lock()
		open := l.Server.perUser["mallory"]
		l.Server.mu.Unlock()
		if open == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d stalled followers still served 20 s after they stopped reading (write timeout 500 ms)", open)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, status := stalledFollow(t, l.Listener.Addr().String(), Path("tenant-a", "chatty"), "mallory"); status != http.StatusOK {
		t.Errorf("after its stalled followers were cut off, the user's next follow got %d", status)
	}
}

// One namespace's followers, however many ServiceAccounts they come as,
// hold at most MaxPerNamespace of the node's streams.
func TestOneNamespaceCannotTakeEveryStream(t *testing.T) {
	hub := NewHub()
	l := serve(t, hub, 0)
	for i := range MaxConnections / MaxFollowers {
		hub.OpenStream(&harnessv1.HarnessRun{ObjectMeta: metav1.ObjectMeta{
			Namespace: "tenant-a", Name: fmt.Sprintf("run-%d", i), UID: types.UID(fmt.Sprint("a", i))}})
	}
	victim := hub.OpenStream(&harnessv1.HarnessRun{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-b", Name: "victim", UID: "b"}})
	_, _ = victim.Write([]byte("alice's output\n"))
	accepted := 0
	for i := range MaxConnections {
		token := fmt.Sprintf("sa-%d", i/MaxPerUser) // four ServiceAccounts
		if _, status := stalledFollow(t, l.Listener.Addr().String(), Path("tenant-a", fmt.Sprintf("run-%d", i/MaxFollowers)), token); status == http.StatusOK {
			accepted++
		}
	}
	if accepted != MaxPerNamespace {
		t.Errorf("one namespace's followers were accepted %d times, want %d", accepted, MaxPerNamespace)
	}
	if status, body := get(t, l, Path("tenant-b", "victim"), "alice"); status != http.StatusOK || !strings.Contains(body, "alice's output") {
		t.Errorf("alice got %d %q beside another namespace's stalled followers", status, strings.TrimSpace(body))
	}
}

// Requests with made-up tokens, waiting on a slow API server's
// TokenReviews, take no stream slot, and from one address at most
// MaxReviewsPerAddress review slots: a user elsewhere still follows her run.
func TestUnauthenticatedRequestsDoNotTakeTheStreams(t *testing.T) {
	slow := make(chan struct{})
	hub := NewHub()
	l := serveWith(t, hub, 0, slowReviews(t, slow))
	victim := hub.OpenStream(&harnessv1.HarnessRun{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-b", Name: "victim", UID: "b"}})
	_, _ = victim.Write([]byte("alice's output\n"))
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the test's own server
	var wg sync.WaitGroup
	for i := range MaxConnections {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodGet, l.BaseURL+Path("tenant-b", "victim"), nil)
			req.Header.Set("Authorization", fmt.Sprintf("Bearer fake-%d", i))
			if resp, err := hc.Do(req); err == nil {
				_ = resp.Body.Close()
			}
		})
	}
	time.Sleep(500 * time.Millisecond) // the made-up tokens wait on the API server
	// Alice, from another address.
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	other := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: dialer.DialContext,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the test's own server
	req, _ := http.NewRequest(http.MethodGet, l.BaseURL+Path("tenant-b", "victim"), nil)
	req.Header.Set("Authorization", "Bearer alice")
	resp, err := other.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "alice's output") {
		t.Errorf("alice got %s %q while another address's made-up tokens waited on the API server", resp.Status, strings.TrimSpace(string(body)))
	}
	close(slow)
	wg.Wait()
}

// Anyone who reaches the port could send each of many connections 1 MB of
// one header and never end it: every bound of the handler starts after the
// headers, and 600 such connections, no credential needed, ran a
// node-agent out of its 512Mi (every run on the node with it). Now the
// header block is bounded (a longer one is refused, 431), the connections
// from one address too (the rest are closed as they come), and the heap
// they hold stays small; a caller with a token is still served during it.
func TestHeaderFloodDoesNotGrowTheNodeAgent(t *testing.T) {
	hub := NewHub()
	l := serve(t, hub, 0)
	addr := strings.TrimPrefix(l.BaseURL, "https://")
	dial := func() (*tls.Conn, error) {
		raw, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return nil, err
		}
		c := tls.Client(raw, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the test's own server
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		return c, nil
	}
	// One header over the bound: refused, not read to its end.
	c, err := dial()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(c, "GET /runs/a/b/log HTTP/1.1\r\nHost: x\r\nX-Pad: %s\r\n\r\n", strings.Repeat("a", 2*MaxHeaderBytes)); err != nil {
		t.Fatal(err)
	}
	if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a %d KiB header: %v, %v; want 431", 2*MaxHeaderBytes>>10, resp, err)
	}
	_ = c.Close()

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	const flood = 300
	header := strings.Repeat("a", 1<<20)
	var wg sync.WaitGroup
	conns := make(chan net.Conn, flood)
	for range flood {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := dial()
			if err != nil {
				return
			}
			conns <- c
			// Never ends the header; the server cuts it at its bound.
			_, _ = fmt.Fprintf(c, "GET /runs/a/b/log HTTP/1.1\r\nHost: x\r\nX-Pad: %s", header)
		}()
	}
	wg.Wait()
	runtime.GC()
	var during runtime.MemStats
	runtime.ReadMemStats(&during)
	if grew := int64(during.HeapInuse) - int64(before.HeapInuse); grew > 48<<20 {
		t.Errorf("%d connections with an unfinished 1 MiB header grew the heap by %d MiB", flood, grew>>20)
	}
	close(conns)
	for c := range conns {
		_ = c.Close()
	}
	// The flood gone (the server sees each connection end), a caller
	// is served as before.
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the test's own server
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := hc.Get(l.BaseURL + "/runs/ns/none/log")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("after the flood: %d, want 401 without a token", resp.StatusCode)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the flood: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// One user with harnessruns/log held all of a run's MaxFollowers, and the
// run's author got 429 for as long as they stayed: a user follows one run
// at most MaxFollowersPerUser times, and another user still follows it.
func TestOneUserCannotTakeARunsFollowers(t *testing.T) {
	hub := NewHub()
	l := serve(t, hub, 0)
	run := hub.OpenStream(&harnessv1.HarnessRun{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", Name: "long", UID: "a"}})
	defer run.Close()
	accepted := 0
	for range MaxFollowers {
		if _, status := stalledFollow(t, l.Listener.Addr().String(), Path("tenant-a", "long"), "mallory"); status == http.StatusOK {
			accepted++
		} else if status != http.StatusTooManyRequests {
			t.Fatalf("status %d, want 200 or 429", status)
		}
	}
	if accepted != MaxFollowersPerUser {
		t.Errorf("one user followed one run %d times, want %d", accepted, MaxFollowersPerUser)
	}
	if _, status := stalledFollow(t, l.Listener.Addr().String(), Path("tenant-a", "long"), "sa-author"); status != http.StatusOK {
		t.Errorf("the run's author beside another user's followers: %d", status)
	}
}
