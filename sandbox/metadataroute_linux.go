package sandbox

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"

	"golang.org/x/sys/unix"
)

// blackholeMetadata adds a blackhole route for each prefix of
// UserModeUnreachable, and of more (IPv4 only: the stack serves no IPv6),
// to the sandbox's network namespace ns, once
// slirp4netns configured it and before bwrap starts in it: a connect there
// fails at once with EINVAL. Nothing in the sandbox can remove them: the
// namespace is the runner's user namespace's, where the sandbox has no
// capability (and every capability is dropped, no user namespace can be
// made).
func blackholeMetadata(ns *os.File, more []netip.Prefix) error {
	fd, err := netlinkIn(ns)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	seq := uint32(0)
	for _, p := range append(slices.Clone(userModeUnreachable), more...) {
		if !p.Addr().Is4() {
			continue
		}
		seq++
		if err := addBlackhole(fd, seq, p.Masked()); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("a blackhole route for %s in the sandbox: %w", p, err)
		}
	}
	return nil
}

// netlinkIn is a route netlink socket in the network namespace ns.
func netlinkIn(ns *os.File) (int, error) {
	fd := -1
	err := inNetns(func() error {
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("entering the sandbox's network namespace: %w", err)
		}
		var err error
		if fd, err = unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE); err != nil {
			fd = -1
			return fmt.Errorf("a netlink socket in the sandbox's network namespace: %w", err)
		}
		return nil
	})
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		return -1, err
	}
	return fd, nil
}

// addBlackhole sends RTM_NEWROUTE for a blackhole route to p on fd and
// reads the kernel's acknowledgement.
func addBlackhole(fd int, seq uint32, p netip.Prefix) error {
	addr := p.Addr().As4()
	const rtaLen = 4 + 4 // struct rtattr + an IPv4 address
	msg := make([]byte, unix.SizeofNlMsghdr+unix.SizeofRtMsg+rtaLen)
	binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.NativeEndian.PutUint16(msg[4:], unix.RTM_NEWROUTE)
	binary.NativeEndian.PutUint16(msg[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK|unix.NLM_F_CREATE|unix.NLM_F_EXCL)
	binary.NativeEndian.PutUint32(msg[8:], seq)
	rt := msg[unix.SizeofNlMsghdr:]
	rt[0] = unix.AF_INET
	rt[1] = byte(p.Bits()) // dst_len
	rt[4] = unix.RT_TABLE_MAIN
	rt[5] = unix.RTPROT_STATIC
	rt[6] = unix.RT_SCOPE_UNIVERSE
	rt[7] = unix.RTN_BLACKHOLE
	attr := rt[unix.SizeofRtMsg:]
	binary.NativeEndian.PutUint16(attr[0:], rtaLen)
	binary.NativeEndian.PutUint16(attr[2:], unix.RTA_DST)
	copy(attr[4:], addr[:])
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return err
	}
	if n < unix.SizeofNlMsghdr+4 || binary.NativeEndian.Uint16(buf[4:]) != unix.NLMSG_ERROR {
		return fmt.Errorf("an unexpected answer from the kernel (%d bytes)", n)
	}
	if errno := int32(binary.NativeEndian.Uint32(buf[unix.SizeofNlMsghdr:])); errno != 0 {
		return unix.Errno(-errno)
	}
	return nil
}
