package storagefault

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/gpuchaos/gpuchaos/internal/node/mountinfo"
)

// ErrNotNetwork says a mount is not a network filesystem whose server this
// package can read from the mount table.
var ErrNotNetwork = errors.New("not a network filesystem (NFS, CIFS or sshfs)")

// ServerOf returns the host name or address of m's storage server. NFS and
// CIFS print the address the kernel connected to as the addr= option,
// which is preferred; otherwise the host comes from the source:
// "[user@]host:dir" (NFS, sshfs; an IPv6 host in brackets) or
// "//host/share" (CIFS). Other types are ErrNotNetwork.
func ServerOf(m mountinfo.Mount) (string, error) {
	switch m.FSType {
	case "nfs", "nfs4", "cifs", "smb3":
		if a := option(m.Options, "addr"); a != "" {
			if ip, err := netip.ParseAddr(a); err == nil {
				return ip.String(), nil
			}
		}
	}
	var host string
	var err error
	switch m.FSType {
	case "nfs", "nfs4", "fuse.sshfs":
		host, err = colonHost(m.Source)
	case "cifs", "smb3":
		host, err = shareHost(m.Source)
	default:
		return "", fmt.Errorf("%s at %s is %s: %w", m.Source, m.Point, m.FSType, ErrNotNetwork)
	}
	if err != nil {
		return "", fmt.Errorf("%s source %q at %s: %w", m.FSType, m.Source, m.Point, err)
	}
	return host, nil
}

// option returns the value of key=value in a comma-separated list.
func option(opts, key string) string {
	for _, o := range strings.Split(opts, ",") {
		if v, ok := strings.CutPrefix(o, key+"="); ok {
			return v
		}
	}
	return ""
}

// colonHost reads the host of "[user@]host:dir" or "[user@][v6addr]:dir".
func colonHost(src string) (string, error) {
	k := strings.IndexAny(src, "[:")
	if k < 0 {
		return "", errors.New("no host: want host:dir")
	}
	user := src[:k]
	var host string
	if src[k] == '[' {
		if user != "" && !strings.HasSuffix(user, "@") {
			return "", errors.New("text before the bracketed address")
		}
		end := strings.Index(src[k:], "]:")
		if end < 0 {
			return "", errors.New("bracketed address without \"]:\"")
		}
		host = src[k+1 : k+end]
		if _, err := netip.ParseAddr(host); err != nil {
			return "", fmt.Errorf("bracketed address: %w", err)
		}
	} else {
		host = user
		if at := strings.LastIndex(host, "@"); at >= 0 {
			host = host[at+1:]
		}
	}
	if host == "" {
		return "", errors.New("empty host")
	}
	return host, nil
}

// shareHost reads the host of "//host/share" (or with backslashes, as
// some mount helpers pass it).
func shareHost(src string) (string, error) {
	s := strings.ReplaceAll(src, `\`, "/")
	rest, ok := strings.CutPrefix(s, "//")
	if !ok {
		return "", errors.New("want //host/share")
	}
	host, _, _ := strings.Cut(rest, "/")
	if host == "" {
		return "", errors.New("empty host")
	}
	return host, nil
}
