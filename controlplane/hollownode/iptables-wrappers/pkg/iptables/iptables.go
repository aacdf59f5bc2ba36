// Package iptables stands in for sigs.k8s.io/iptables-wrappers/pkg/iptables, which
// Kubernetes 1.38's kubelet imports (pkg/kubelet/kubelet_network_linux.go) but the Go
// module proxy does not serve (v1.0.0 and the version list answer 403 "not available").
// build-binaries.sh replaces the module with this directory when a release's go.mod
// requires it.
//
// It declares only what the kubelet uses, and NewBestEffort finds no iptables, so a
// kubelet that got this far would log "No iptables support on this system" and go on, as
// on a host without iptables. The hollow kubelet does not get this far: it runs with
// makeIPTablesUtilChains off (hollownode/kubelet.go), so it never touches the host's
// firewall on any release.
package iptables

import (
	"context"
	"errors"
	"time"
)

// Mode says how NewBestEffort picks between iptables-legacy and iptables-nft.
type Mode int

const (
	// UseInstalledMode uses whichever iptables binary is installed.
	UseInstalledMode Mode = iota
	// DetectHostMode detects the mode the host's rules use.
	DetectHostMode
)

// RulePosition is -I (Prepend) or -A (Append).
type RulePosition string

const (
	Prepend RulePosition = "-I"
	Append  RulePosition = "-A"
)

// Protocol is the IP family an Interface manages.
type Protocol string

const (
	ProtocolIPv4 Protocol = "IPv4"
	ProtocolIPv6 Protocol = "IPv6"
)

// Table is an iptables table.
type Table string

const (
	TableNAT    Table = "nat"
	TableFilter Table = "filter"
	TableMangle Table = "mangle"
)

// Chain is an iptables chain.
type Chain string

const (
	ChainOutput Chain = "OUTPUT"
	ChainInput  Chain = "INPUT"
)

// ErrNotSupported is what every method returns: there is no iptables here.
var ErrNotSupported = errors.New("iptables: not available in the hollow kubelet")

// Interface is the part of the real Interface the kubelet calls.
type Interface interface {
	EnsureChain(ctx context.Context, table Table, chain Chain) (bool, error)
	EnsureRule(ctx context.Context, position RulePosition, table Table, chain Chain, args ...string) (bool, error)
	IsIPv6() bool
	Protocol() Protocol
	Monitor(ctx context.Context, canary Chain, tables []Table, reloadFunc func(), interval time.Duration)
}

// NewBestEffort returns the usable iptables per IP family: none.
func NewBestEffort(ctx context.Context, mode Mode) map[Protocol]Interface {
	return map[Protocol]Interface{}
}
