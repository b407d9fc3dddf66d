package main

import (
	"context"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
	"github.com/go-chi/chi/v5"
	"github.com/labstack/echo/v4"
	"github.com/nats-io/nats.go"
	"github.com/riverqueue/river"
)

func routers(nc *nats.Conn) {
	r := chi.NewRouter()
	r.Post("/refunds", nil)
	g := gin.New()
	g.PUT("/carts/:id", nil)
	e := echo.New()
	e.DELETE("/sessions/:id", nil)
	nc.QueueSubscribe("orders.created", "billing", nil)
}

type EmailWorker struct{}

func (w *EmailWorker) Work(ctx context.Context, job *river.Job[EmailArgs]) error { return nil }

type EmailArgs struct{}

func capturePayPal(ctx context.Context, orderID string) {
	req, _ := http.NewRequestWithContext(ctx, "POST", "https://api-m.paypal.com/v2/checkout/orders/"+orderID+"/capture", strings.NewReader("{}"))
	http.DefaultClient.Do(req)
}
