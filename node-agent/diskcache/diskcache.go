// Package diskcache reads the folders of the node's on-disk caches (the
// environment images of envimage, the fixtures of fixturesource): one
// folder per entry, complete once its metadata file (a JSON object with
// the entry's "size" in bytes) is written, last used at the folder's
// modification time. Each cache keeps its own locking and its own rule of
// what may not be evicted; this package only lists.
package diskcache

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Entry is one complete entry of a cache folder.
type Entry struct {
	Key  string
	Size int64
	Used time.Time
}

// Entries lists dir's complete entries, least recently used first, and
// their total size. Folders whose name starts with "." (work in progress,
// eviction in progress) and entries without a readable metadata file are
// left out.
func Entries(dir, metaName string) ([]Entry, int64) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, 0
	}
	var all []Entry
	var total int64
	for _, d := range ents {
		if strings.HasPrefix(d.Name(), ".") || !d.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, d.Name(), metaName))
		if err != nil {
			continue
		}
		var m struct {
			Size int64 `json:"size"`
		}
		if json.Unmarshal(b, &m) != nil {
			continue
		}
		fi, err := d.Info()
		if err != nil {
			continue
		}
		all = append(all, Entry{Key: d.Name(), Size: m.Size, Used: fi.ModTime()})
		total += m.Size
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Used.Before(all[j].Used) })
	return all, total
}

// Keys lists the keys of dir's entries that have a metadata file, sorted.
func Keys(dir, metaName string) []string {
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		if _, err := os.Stat(filepath.Join(dir, e.Name(), metaName)); err == nil {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out
}
