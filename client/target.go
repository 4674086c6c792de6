package client

import (
	"net"
	"net/url"
	"strings"
)

// IsLoopback reports whether target, a gRPC dial target, names this
// machine: a loopback IP, "localhost", or a Unix socket, with or without a
// scheme ("dns:///localhost:7070", "passthrough:///127.0.0.1:7070",
// "unix:///run/idem.sock"). Plaintext to such a target never crosses a
// network, so New sends a WithToken token over WithInsecure only to such a
// target; the idem CLI chooses plaintext by the same rule, so the two never
// disagree. Any other host name counts as remote, even one that resolves to
// a loopback address.
func IsLoopback(target string) bool {
	if strings.HasPrefix(target, "unix:") || strings.HasPrefix(target, "unix-abstract:") {
		return true
	}
	hostPort := target
	if strings.Contains(target, "://") { // dns:///host:port, passthrough:///host:port
		u, err := url.Parse(target)
		if err != nil {
			return false
		}
		hostPort = strings.TrimPrefix(u.Path, "/")
	}
	host, _, err := net.SplitHostPort(hostPort)
	if err != nil {
		host = strings.Trim(hostPort, "[]") // no port
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
