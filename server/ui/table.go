package ui

import (
	"net/url"
	"slices"
	"strconv"

	"github.com/gin-gonic/gin"
)

// Pager is one page of a paginated table: which page, how many, and the links to the others
// (the "pager" partial renders it). Links keep every other query parameter (filters, sort).
type Pager struct {
	Page, Pages, Total, Size int
	Links                    []pageLink
	Prev, Next               string // "" when there is none
}

// pageLink is one numbered link of a Pager; Page 0 is a gap ("…").
type pageLink struct {
	Page    int
	URL     string
	Current bool
}

// PageParam reads ?page= (1-based); anything missing or invalid is page 1.
func PageParam(c *gin.Context) int {
	n, err := strconv.Atoi(c.Query("page"))
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// NewPager builds the Pager for total rows, size per page, at the request's ?page= (clamped to
// the last page). Skip is how many rows come before the page.
func NewPager(c *gin.Context, total, size int) Pager {
	pages := max(1, (total+size-1)/size)
	p := min(PageParam(c), pages)
	pg := Pager{Page: p, Pages: pages, Total: total, Size: size}
	link := func(n int) string {
		q := c.Request.URL.Query()
		if n == 1 {
			q.Del("page")
		} else {
			q.Set("page", strconv.Itoa(n))
		}
		u := url.URL{Path: c.Request.URL.Path, RawQuery: q.Encode(), Fragment: c.Request.URL.Fragment}
		return u.String()
	}
	if p > 1 {
		pg.Prev = link(p - 1)
	}
	if p < pages {
		pg.Next = link(p + 1)
	}
	// First, last, and two either side of the current page, with gaps between.
	last := 0
	for n := 1; n <= pages; n++ {
		if n != 1 && n != pages && (n < p-2 || n > p+2) {
			continue
		}
		if last != 0 && n > last+1 {
			pg.Links = append(pg.Links, pageLink{})
		}
		pg.Links = append(pg.Links, pageLink{Page: n, URL: link(n), Current: n == p})
		last = n
	}
	return pg
}

// Skip is the number of rows before this page.
func (p Pager) Skip() int { return (p.Page - 1) * p.Size }

// Sorting is a table's sort order from ?sort= and ?order=, restricted to the columns the page
// allows, and the links its column headers need.
type Sorting struct {
	Key  string
	Desc bool
	req  *url.URL
}

// SortParam reads the sort column (one of allowed, else def) and the order (?order=asc or
// desc, else defDesc).
func SortParam(c *gin.Context, allowed []string, def string, defDesc bool) Sorting {
	s := Sorting{Key: def, Desc: defDesc, req: c.Request.URL}
	if k := c.Query("sort"); slices.Contains(allowed, k) {
		s.Key = k
	}
	switch c.Query("order") {
	case "asc":
		s.Desc = false
	case "desc":
		s.Desc = true
	}
	return s
}

// AscendingUnlessAsked sorts by the named columns (names and other text, which read best from
// A) in ascending order when the request gives no ?order=; other columns keep the default.
func (s *Sorting) AscendingUnlessAsked(c *gin.Context, keys ...string) {
	if c.Query("order") == "" && slices.Contains(keys, s.Key) {
		s.Desc = false
	}
}

// URL is the link a column header points to: sort by key, flipping the order if the table is
// already sorted by it, back to page 1.
func (s Sorting) URL(key string) string {
	q := s.req.Query()
	q.Set("sort", key)
	order := "desc"
	if key == s.Key && s.Desc {
		order = "asc"
	}
	q.Set("order", order)
	q.Del("page")
	u := url.URL{Path: s.req.Path, RawQuery: q.Encode(), Fragment: s.req.Fragment}
	return u.String()
}

// Arrow is the marker after a column header: ▲ or ▼ on the sorted column, else nothing.
func (s Sorting) Arrow(key string) string {
	switch {
	case key != s.Key:
		return ""
	case s.Desc:
		return "▼"
	default:
		return "▲"
	}
}
