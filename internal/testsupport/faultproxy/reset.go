package faultproxy

import (
	"math/rand/v2"
	"net"
)

// Reset resets up to n of the open connections, chosen at random, with a TCP
// RST (as a crashed peer or a middlebox would), and returns how many it
// reset. New connections keep going through.
func (p *Proxy) Reset(n int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	open := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		open = append(open, c)
	}
	rand.Shuffle(len(open), func(i, j int) { open[i], open[j] = open[j], open[i] })
	reset := 0
	for _, c := range open {
		if reset == n {
			break
		}
		if _, still := p.conns[c]; !still {
			continue
		}
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // close sends RST instead of FIN
		}
		c.Close()
		delete(p.conns, c)
		reset++
	}
	return reset
}
