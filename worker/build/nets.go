package build

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/shoal-chess/shoal/protocol"
)

// maxSourceFileBytes bounds the source files read to find the networks.
const maxSourceFileBytes = 4 << 20

// placeNets puts the networks the sources in src name into src, so that the Makefile finds
// them there and downloads nothing: from Dir/nets when a verified copy is there, else from the
// server, checked against the hash in its name and kept in Dir/nets.
func (b *Builder) placeNets(ctx context.Context, srv Server, src string) error {
	evaluateH, err := readSmall(filepath.Join(src, "evaluate.h"))
	if err != nil {
		return fmt.Errorf("build: %w", err)
	}
	ucioption, err := readSmall(filepath.Join(src, "ucioption.cpp"))
	if err != nil {
		return fmt.Errorf("build: %w", err)
	}
	for _, name := range protocol.NetsInSource(evaluateH, ucioption) {
		data, err := b.net(ctx, srv, name)
		if err != nil {
			return err
		}
		dest := filepath.Join(src, name)
		_ = os.Remove(dest) // a file of the commit's own, or a link: the verified copy wins
		if err := os.WriteFile(dest, data, 0o644); err != nil {
			return fmt.Errorf("build: %w", err)
		}
	}
	return nil
}

// readSmall reads a source file, nil if there is none.
func readSmall(path string) ([]byte, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxSourceFileBytes))
}

// net returns the network called name: the copy in Dir/nets if it matches its name, else the
// server's, which must.
func (b *Builder) net(ctx context.Context, srv Server, name string) ([]byte, error) {
	if !protocol.ValidNetName(name) {
		return nil, fmt.Errorf("build: %q is not a network's name", name)
	}
	path := filepath.Join(b.nets, name)
	if data, err := os.ReadFile(path); err == nil {
		if protocol.NetNameMatches(name, data) {
			b.log.Info("Network", "name", name, "from", "cache")
			return data, nil
		}
		b.log.Warn("Removing a cached network that does not match its name", "name", name)
		_ = os.Remove(path)
	}
	ctx, cancel := context.WithTimeout(ctx, downloadTimeout)
	defer cancel()
	data, err := Download(ctx, srv, "/api/nn/"+name, "network "+name, maxNetBytes)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("build: %w", err)
	}
	if !protocol.NetNameMatches(name, data) {
		return nil, fmt.Errorf("build: network %s from the server does not match its name: its sha256 is %s",
			name, protocol.SHA256Hex(data))
	}
	if err := writeAtomic(path, data, 0o644); err != nil {
		return nil, fmt.Errorf("build: keep network %s: %w", name, err)
	}
	b.log.Info("Network", "name", name, "from", "server", "bytes", len(data))
	return data, nil
}

// writeAtomic writes data to path through a temporary file in its directory, so that the
// file is whole or absent.
func writeAtomic(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), mode)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
}
