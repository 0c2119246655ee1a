// Command gogitcompare measures what the server's repository mirrors do, on one repository, with
// the git command and with the go-git library, so that the choice between them (the README's
// "Why the git command") can be checked again on any machine:
//
//	cd gitmirror/gogitcompare && go run . -repo /path/to/Stockfish.git -impl git
//	cd gitmirror/gogitcompare && go run . -repo /path/to/Stockfish.git -impl gogit
//
// Each run mirrors the repository's branches and tags into a fresh bare repository, then times
// the reads a server makes: a branch resolved, a commit read, two merge bases (adjacent commits
// and far ones), the diff of master's last commit, and a source archive. It prints the peak
// memory of its own process, which for go-git is the server's heap. It is a module of its own,
// so that the product does not depend on go-git.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

func main() {
	repo := flag.String("repo", "", "the repository to mirror (a local path)")
	impl := flag.String("impl", "git", "git (the command) or gogit (the library)")
	far := flag.String("far", "sf_10", "a ref far behind master, for the slow merge base")
	flag.Parse()
	dst, err := os.MkdirTemp("", "gogitcompare-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dst)
	specs := []string{"+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"}
	switch *impl {
	case "git":
		measureGit(*repo, dst, *far, specs)
	case "gogit":
		measureGoGit(*repo, dst, *far, specs)
	default:
		log.Fatalf("-impl %q: want git or gogit", *impl)
	}
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	var children syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children)
	fmt.Printf("%-36s %8d MB (largest child process: %d MB)\n", "peak memory of this process", ru.Maxrss>>10, children.Maxrss>>10)
}

// timeit prints the mean time of n calls of f.
func timeit(name string, n int, f func()) {
	start := time.Now()
	for range n {
		f()
	}
	fmt.Printf("%-36s %10.2f ms\n", name, float64(time.Since(start).Microseconds())/1000/float64(n))
}

func gitCmd(dir string, args ...string) string {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.Output()
	if err != nil {
		log.Fatalf("git %s: %v", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out))
}

func measureGit(repo, dst, far string, specs []string) {
	timeit("mirror (branches and tags)", 1, func() {
		gitCmd(dst, "init", "-q", "--bare")
		gitCmd(dst, append([]string{"-c", "protocol.file.allow=always", "fetch", "-q", "--no-tags", repo}, specs...)...)
	})
	timeit("resolve a branch", 20, func() { gitCmd(dst, "rev-parse", "--verify", "master^{commit}") })
	timeit("read a commit", 20, func() { gitCmd(dst, "cat-file", "commit", "master") })
	timeit("merge base, adjacent commits", 20, func() { gitCmd(dst, "merge-base", "master~1", "master") })
	timeit("merge base, "+far+" and master", 20, func() { gitCmd(dst, "merge-base", far, "master") })
	timeit("diff master~1..master, with counts", 20, func() {
		gitCmd(dst, "diff", "--numstat", "master~1", "master")
		gitCmd(dst, "diff", "-p", "master~1", "master")
	})
	timeit("archive master (tar, gzipped in Go)", 5, func() {
		cmd := exec.Command("git", "archive", "--format=tar", "master")
		cmd.Dir = dst
		tarball, err := cmd.Output()
		if err != nil {
			log.Fatal(err)
		}
		gz := gzip.NewWriter(io.Discard)
		gz.Write(tarball)
		gz.Close()
	})
}

func measureGoGit(repo, dst, far string, specs []string) {
	var r *git.Repository
	timeit("mirror (branches and tags)", 1, func() {
		var err error
		if r, err = git.PlainInit(dst, true); err != nil {
			log.Fatal(err)
		}
		if _, err = r.CreateRemote(&config.RemoteConfig{Name: "origin", URLs: []string{repo}}); err != nil {
			log.Fatal(err)
		}
		var rs []config.RefSpec
		for _, s := range specs {
			rs = append(rs, config.RefSpec(s))
		}
		if err = r.Fetch(&git.FetchOptions{RemoteName: "origin", RefSpecs: rs, Tags: git.NoTags}); err != nil {
			log.Fatal(err)
		}
	})
	commit := func(rev string) *object.Commit {
		h, err := r.ResolveRevision(plumbing.Revision(rev))
		if err != nil {
			log.Fatalf("resolve %s: %v", rev, err)
		}
		c, err := r.CommitObject(*h)
		if err != nil {
			log.Fatal(err)
		}
		return c
	}
	timeit("resolve a branch (opening the repository)", 20, func() {
		var err error
		if r, err = git.PlainOpen(dst); err != nil {
			log.Fatal(err)
		}
		commit("master")
	})
	timeit("read a commit", 20, func() { _ = commit("master").Message })
	head, parent, old := commit("master"), commit("master~1"), commit(far)
	timeit("merge base, adjacent commits", 20, func() {
		if _, err := parent.MergeBase(head); err != nil {
			log.Fatal(err)
		}
	})
	timeit("merge base, "+far+" and master", 5, func() {
		if _, err := old.MergeBase(head); err != nil {
			log.Fatal(err)
		}
	})
	timeit("diff master~1..master, with counts", 20, func() {
		p, err := parent.Patch(head)
		if err != nil {
			log.Fatal(err)
		}
		_ = p.String()
		_ = p.Stats()
	})
	timeit("archive master (tar, gzipped in Go)", 5, func() {
		tree, err := head.Tree()
		if err != nil {
			log.Fatal(err)
		}
		var buf bytes.Buffer
		gz := gzip.NewWriter(&buf)
		tw := tar.NewWriter(gz)
		err = tree.Files().ForEach(func(f *object.File) error {
			rd, err := f.Reader()
			if err != nil {
				return err
			}
			defer rd.Close()
			if err := tw.WriteHeader(&tar.Header{Name: f.Name, Mode: 0o644, Size: f.Size}); err != nil {
				return err
			}
			_, err = io.Copy(tw, rd)
			return err
		})
		if err != nil {
			log.Fatal(err)
		}
		tw.Close()
		gz.Close()
	})
}
