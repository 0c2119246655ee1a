package api

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/protocol"
)

// The worker protocol's frequent replies are written by their own AppendJSON, into a pooled
// buffer, instead of by gin's c.JSON (encoding/json's reflection, a new slice per reply): the
// bytes are the same (protocol's tests compare them with encoding/json's), and so are the
// status, the headers and what happens when the write fails.

// jsonContentType is the Content-Type gin gives a JSON reply.
var jsonContentType = []string{"application/json; charset=utf-8"}

// appendReply answers status with what appendJSON appends, as c.JSON would answer the value it
// encodes. It reports false, having written nothing, if appendJSON leaves the value to
// encoding/json.
func appendReply(c *gin.Context, status int, appendJSON func([]byte) ([]byte, bool)) bool {
	buf := bodyBuffers.Get().(*bodyBuffer)
	defer buf.release() // the writer copies what it is given
	b, ok := appendJSON(buf.b[:0])
	if !ok {
		return false
	}
	buf.b = b
	c.Status(status)
	h := c.Writer.Header()
	if len(h["Content-Type"]) == 0 {
		h["Content-Type"] = jsonContentType
	}
	if !bodyAllowedForStatus(status) {
		c.Writer.WriteHeaderNow()
		return true
	}
	if _, err := c.Writer.Write(b); err != nil {
		_ = c.Error(err)
		c.Abort()
	}
	return true
}

// bodyAllowedForStatus is gin's rule for a status that carries no body.
func bodyAllowedForStatus(status int) bool {
	switch {
	case status >= 100 && status <= 199, status == http.StatusNoContent, status == http.StatusNotModified:
		return false
	}
	return true
}

// One function per reply type, not a generic one: through a type parameter the reply escapes
// to the heap, an allocation per call that these replies exist to avoid.

// replyUpdate answers 200 with r: beat's and update_task's reply.
func replyUpdate(c *gin.Context, r protocol.UpdateReply) {
	if !appendReply(c, http.StatusOK, r.AppendJSON) {
		c.JSON(http.StatusOK, r)
	}
}

// replyDone answers 200 with r.
func replyDone(c *gin.Context, r protocol.DoneReply) {
	if !appendReply(c, http.StatusOK, r.AppendJSON) {
		c.JSON(http.StatusOK, r)
	}
}

// replyTask answers 200 with r: request_task's reply.
func replyTask(c *gin.Context, r protocol.TaskReply) {
	if !appendReply(c, http.StatusOK, r.AppendJSON) {
		c.JSON(http.StatusOK, r)
	}
}

// replyVersion answers 200 with r: request_version's reply.
func replyVersion(c *gin.Context, r protocol.VersionReply) {
	if !appendReply(c, http.StatusOK, r.AppendJSON) {
		c.JSON(http.StatusOK, r)
	}
}

// replyError answers status with r and ends the request's handlers, as c.AbortWithStatusJSON.
func replyError(c *gin.Context, status int, r protocol.ErrorReply) {
	c.Abort()
	if !appendReply(c, status, r.AppendJSON) {
		c.JSON(status, r)
	}
}
