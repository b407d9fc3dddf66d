package paypaltest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/providers/internal/fakekit"
)

// Test payment methods: vault ids the fake recognises in payment_source.card.vault_id, named as
// in Stripe's test mode so that one set of names serves every provider's fake.
const (
	PaymentMethodVisa                   = "pm_card_visa"
	PaymentMethodDeclined               = "pm_card_chargeDeclined"
	PaymentMethodInsufficientFunds      = "pm_card_chargeDeclinedInsufficientFunds"
	PaymentMethodAuthenticationRequired = "pm_card_authenticationRequired"
)

// Processor response codes of declined captures (processor_response.response_code).
const (
	ResponseCodeGenericDecline    = "0005" // do not honor
	ResponseCodeInsufficientFunds = "0051"
)

type testCard struct {
	responseCode string // "" if captures succeed
	needsAction  bool
}

var testCards = map[string]testCard{
	PaymentMethodVisa:                   {},
	PaymentMethodDeclined:               {responseCode: ResponseCodeGenericDecline},
	PaymentMethodInsufficientFunds:      {responseCode: ResponseCodeInsufficientFunds},
	PaymentMethodAuthenticationRequired: {needsAction: true},
}

// Limits of the Orders API on the fields the fake reads.
const (
	maxCustomIDLen    = 127
	maxInvoiceIDLen   = 127
	maxReferenceIDLen = 256
)

type order struct {
	id, intent, status                      string
	referenceID, customID, invoiceID, descr string
	amount                                  money.Money
	vaultID                                 string
	requestID                               string
	created, updated                        time.Time
	captures                                []*capture
}

type capture struct {
	id, status, orderID string
	amount              money.Money
	refunded            money.Money
	customID, invoiceID string
	responseCode        string
	requestID           string
	created, updated    time.Time
	refunds             []*refund
}

type refund struct {
	id, status, captureID, orderID   string
	amount                           money.Money
	customID, invoiceID, noteToPayer string
	requestID                        string
	created, updated                 time.Time
}

// JSON views, with PayPal's field names.

type amountJSON struct {
	CurrencyCode string `json:"currency_code"`
	Value        string `json:"value"`
}

// amountOf is m as PayPal writes it, with PayPal's decimal places for the currency.
func amountOf(m money.Money) amountJSON {
	return amountJSON{CurrencyCode: string(m.Currency()), Value: formatValue(m)}
}

type link struct {
	Href   string `json:"href"`
	Rel    string `json:"rel"`
	Method string `json:"method"`
}

type orderJSON struct {
	ID            string         `json:"id"`
	Intent        string         `json:"intent"`
	Status        string         `json:"status"`
	PaymentSource *paymentSource `json:"payment_source,omitempty"`
	PurchaseUnits []purchaseUnit `json:"purchase_units"`
	CreateTime    string         `json:"create_time"`
	UpdateTime    string         `json:"update_time"`
	Links         []link         `json:"links"`
}

type paymentSource struct {
	Card *struct {
		VaultID string `json:"vault_id,omitempty"`
	} `json:"card,omitempty"`
}

type purchaseUnit struct {
	ReferenceID string        `json:"reference_id,omitempty"`
	Amount      *amountJSON   `json:"amount,omitempty"`
	CustomID    string        `json:"custom_id,omitempty"`
	InvoiceID   string        `json:"invoice_id,omitempty"`
	Description string        `json:"description,omitempty"`
	Payments    *paymentsJSON `json:"payments,omitempty"`
}

type paymentsJSON struct {
	Captures []captureJSON `json:"captures,omitempty"`
	Refunds  []refundJSON  `json:"refunds,omitempty"`
}

type captureJSON struct {
	ID                string             `json:"id"`
	Status            string             `json:"status"`
	StatusDetails     *statusDetails     `json:"status_details,omitempty"`
	Amount            amountJSON         `json:"amount"`
	FinalCapture      bool               `json:"final_capture"`
	CustomID          string             `json:"custom_id,omitempty"`
	InvoiceID         string             `json:"invoice_id,omitempty"`
	ProcessorResponse *processorResponse `json:"processor_response,omitempty"`
	SupplementaryData supplementaryData  `json:"supplementary_data"`
	CreateTime        string             `json:"create_time"`
	UpdateTime        string             `json:"update_time"`
	Links             []link             `json:"links"`
}

type statusDetails struct {
	Reason string `json:"reason"`
}

type processorResponse struct {
	AVSCode      string `json:"avs_code,omitempty"`
	CVVCode      string `json:"cvv_code,omitempty"`
	ResponseCode string `json:"response_code"`
}

type supplementaryData struct {
	RelatedIDs struct {
		OrderID string `json:"order_id"`
	} `json:"related_ids"`
}

type refundJSON struct {
	ID          string     `json:"id"`
	Status      string     `json:"status"`
	Amount      amountJSON `json:"amount"`
	CustomID    string     `json:"custom_id,omitempty"`
	InvoiceID   string     `json:"invoice_id,omitempty"`
	NoteToPayer string     `json:"note_to_payer,omitempty"`
	CreateTime  string     `json:"create_time"`
	UpdateTime  string     `json:"update_time"`
	Links       []link     `json:"links"`
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func (o *order) view(s *Server) orderJSON {
	amt := amountOf(o.amount)
	pu := purchaseUnit{ReferenceID: o.referenceID, Amount: &amt, CustomID: o.customID, InvoiceID: o.invoiceID, Description: o.descr}
	if len(o.captures) > 0 {
		pu.Payments = &paymentsJSON{}
		for _, c := range o.captures {
			pu.Payments.Captures = append(pu.Payments.Captures, c.view())
			for _, r := range c.refunds {
				pu.Payments.Refunds = append(pu.Payments.Refunds, r.view())
			}
		}
	}
	v := orderJSON{ID: o.id, Intent: o.intent, Status: o.status, PurchaseUnits: []purchaseUnit{pu},
		CreateTime: stamp(o.created), UpdateTime: stamp(o.updated),
		Links: []link{{Href: "/v2/checkout/orders/" + o.id, Rel: "self", Method: "GET"}}}
	if o.vaultID != "" {
		v.PaymentSource = &paymentSource{}
		v.PaymentSource.Card = &struct {
			VaultID string `json:"vault_id,omitempty"`
		}{o.vaultID}
	}
	switch o.status {
	case "PAYER_ACTION_REQUIRED":
		v.Links = append(v.Links, link{Href: "https://www.sandbox.paypal.com/checkoutnow?token=" + o.id, Rel: "payer-action", Method: "GET"})
	case "APPROVED":
		v.Links = append(v.Links, link{Href: "/v2/checkout/orders/" + o.id + "/capture", Rel: "capture", Method: "POST"})
	}
	return v
}

func (c *capture) view() captureJSON {
	v := captureJSON{ID: c.id, Status: c.status, Amount: amountOf(c.amount), FinalCapture: true,
		CustomID: c.customID, InvoiceID: c.invoiceID, CreateTime: stamp(c.created), UpdateTime: stamp(c.updated),
		Links: []link{{Href: "/v2/payments/captures/" + c.id, Rel: "self", Method: "GET"},
			{Href: "/v2/checkout/orders/" + c.orderID, Rel: "up", Method: "GET"}}}
	v.SupplementaryData.RelatedIDs.OrderID = c.orderID
	if c.responseCode != "" {
		v.ProcessorResponse = &processorResponse{AVSCode: "Y", CVVCode: "M", ResponseCode: c.responseCode}
	}
	if c.status == "DECLINED" {
		v.StatusDetails = &statusDetails{Reason: "DECLINED_BY_PROCESSOR"}
	}
	if c.status == "COMPLETED" || c.status == "PARTIALLY_REFUNDED" {
		v.Links = append(v.Links, link{Href: "/v2/payments/captures/" + c.id + "/refund", Rel: "refund", Method: "POST"})
	}
	return v
}

func (r *refund) view() refundJSON {
	return refundJSON{ID: r.id, Status: r.status, Amount: amountOf(r.amount), CustomID: r.customID,
		InvoiceID: r.invoiceID, NoteToPayer: r.noteToPayer, CreateTime: stamp(r.created), UpdateTime: stamp(r.updated),
		Links: []link{{Href: "/v2/payments/refunds/" + r.id, Rel: "self", Method: "GET"},
			{Href: "/v2/payments/captures/" + r.captureID, Rel: "up", Method: "GET"}}}
}

func tooLong(field string, max int) *response {
	return invalidRequest(field, "INVALID_STRING_MAX_LENGTH", fmt.Sprintf("The value of a field is too long (at most %d characters).", max))
}

// createOrder is POST /v2/checkout/orders.
//
// With a payment source the create is single-step: PayPal authorizes and captures in the create
// itself (intent CAPTURE), and answers the order COMPLETED with
// purchase_units[].payments.captures[] ("When a payer is using a card to check out, the Orders
// API allows you to capture the payment in a single request ... the Authorize and Capture
// requests occur in a single request",
// https://developer.paypal.com/api/orders-v2/save-with-purchase/cards/; the PayPal-Request-Id
// "is mandatory for all single-step create order calls (E.g. Create Order Request with payment
// source information like Card, PayPal.vault_id, ...)",
// https://developer.paypal.com/api/orders/v2/#orders_create). A declined card also gives a
// COMPLETED order, whose capture is DECLINED ("A completed order can indicate a payment was
// authorized, an authorized payment was captured, or a payment was declined",
// https://developer.paypal.com/api/orders/v2/definitions/order_status/). A card that needs 3-D
// Secure gives PAYER_ACTION_REQUIRED and no capture (same page; "The API response returns the
// order status as PAYER_ACTION_REQUIRED", save-with-purchase/cards). Without a payment source the
// order is CREATED and waits for the payer's approval; it is captured by an explicit POST
// .../capture once APPROVED.
func (s *Server) createOrder(c *call) (*response, resourceRef) {
	var req struct {
		Intent        string `json:"intent"`
		PurchaseUnits []struct {
			ReferenceID string      `json:"reference_id"`
			CustomID    string      `json:"custom_id"`
			InvoiceID   string      `json:"invoice_id"`
			Description string      `json:"description"`
			Amount      *amountJSON `json:"amount"`
		} `json:"purchase_units"`
		PaymentSource *paymentSource `json:"payment_source"`
	}
	if err := json.Unmarshal(c.body, &req); err != nil {
		return invalidRequest("", "MALFORMED_REQUEST_JSON", "The request JSON is not well formed: "+err.Error()), resourceRef{}
	}
	// intent and purchase_units are required, and each purchase unit's amount with its
	// currency_code and value (order_request, purchase_unit_request and money in
	// https://github.com/paypal/paypal-rest-api-specifications/blob/main/openapi/checkout_orders_v2.json;
	// https://developer.paypal.com/api/orders/v2/#orders_create). Their absence is 400
	// INVALID_REQUEST with issue MISSING_REQUIRED_PARAMETER naming the field
	// (https://developer.paypal.com/api/rest/reference/orders/v2/errors/#create-order, body shape
	// https://developer.paypal.com/api/rest/responses/#link-validationerrors).
	switch {
	case req.Intent == "":
		return invalidRequest("/intent", "MISSING_REQUIRED_PARAMETER", "A required field / parameter is missing."), resourceRef{}
	case req.Intent != "CAPTURE":
		return invalidRequest("/intent", "INVALID_PARAMETER_VALUE", "paypaltest supports intent CAPTURE only."), resourceRef{}
	case len(req.PurchaseUnits) == 0:
		return invalidRequest("/purchase_units", "MISSING_REQUIRED_PARAMETER", "A required field / parameter is missing."), resourceRef{}
	case len(req.PurchaseUnits) > 1:
		return invalidRequest("/purchase_units", "INVALID_ARRAY_MAX_ITEMS", "paypaltest supports one purchase unit per order."), resourceRef{}
	}
	pu := req.PurchaseUnits[0]
	switch {
	case len(pu.CustomID) > maxCustomIDLen:
		return tooLong("/purchase_units/0/custom_id", maxCustomIDLen), resourceRef{}
	case len(pu.InvoiceID) > maxInvoiceIDLen:
		return tooLong("/purchase_units/0/invoice_id", maxInvoiceIDLen), resourceRef{}
	case len(pu.ReferenceID) > maxReferenceIDLen:
		return tooLong("/purchase_units/0/reference_id", maxReferenceIDLen), resourceRef{}
	}
	amount, errResp := parseAmount(pu.Amount, "/purchase_units/0/amount") // required, see above
	if errResp != nil {
		return errResp, resourceRef{}
	}
	status, vaultID := "CREATED", ""
	var card testCard
	if req.PaymentSource != nil {
		// "PayPal-Request-Id ... is mandatory for all single-step create order calls (E.g. Create
		// Order Request with payment source information like Card ...)"
		// (https://developer.paypal.com/api/orders/v2/#orders_create); its absence is 400
		// PAYPAL_REQUEST_ID_REQUIRED (https://developer.paypal.com/api/rest/reference/orders/v2/errors/#create-order).
		if c.requestID == "" {
			return apiError(http.StatusBadRequest, "INVALID_REQUEST", "Request is not well-formed, syntactically incorrect, or violates schema.",
				detail{Field: "PayPal-Request-Id", Location: "header", Issue: "PAYPAL_REQUEST_ID_REQUIRED",
					Description: "A PayPal-Request-Id is required if you are trying to process payment for an Order."}), resourceRef{}
		}
		if req.PaymentSource.Card == nil || req.PaymentSource.Card.VaultID == "" {
			return invalidRequest("/payment_source/card/vault_id", "MISSING_REQUIRED_PARAMETER",
				"paypaltest supports payment_source.card.vault_id only."), resourceRef{}
		}
		vaultID = req.PaymentSource.Card.VaultID
		var ok bool
		if card, ok = testCards[vaultID]; !ok {
			return unprocessable("PAYMENT_SOURCE_CANNOT_BE_USED",
				fmt.Sprintf("The vault id %q is not a payment method paypaltest knows.", vaultID)), resourceRef{}
		}
		status = "APPROVED" // authorized; captured just below unless the payer must act
		if card.needsAction {
			status = "PAYER_ACTION_REQUIRED"
		}
	}
	now := s.clock()
	if pu.ReferenceID == "" {
		pu.ReferenceID = "default"
	}
	o := &order{id: s.newIDLocked("ORDFAKE"), intent: req.Intent, status: status, referenceID: pu.ReferenceID,
		customID: pu.CustomID, invoiceID: pu.InvoiceID, descr: pu.Description, amount: amount, vaultID: vaultID,
		requestID: c.requestID, created: now, updated: now}
	s.orders[o.id] = o
	s.orderList = append(s.orderList, o)
	if status == "APPROVED" {
		s.captureLocked(o, card, c.requestID, now) // single-step: the create captures
	}
	return jsonResponse(http.StatusCreated, o.view(s)), resourceRef{"order", o.id}
}

// getOrder is GET /v2/checkout/orders/{id}.
func (s *Server) getOrder(c *call) (*response, resourceRef) {
	o, ok := s.orders[c.r.PathValue("id")]
	if !ok {
		return notFound("order", c.r.PathValue("id")), resourceRef{}
	}
	return jsonResponse(http.StatusOK, o.view(s)), resourceRef{}
}

// captureOrder is POST /v2/checkout/orders/{id}/capture, whose body has no required field (the
// order is the path's): "To successfully capture payment for an order, the buyer must first
// approve the order" (https://developer.paypal.com/api/orders/v2/#orders_capture).
// An order that is not APPROVED is 422 ORDER_NOT_APPROVED; one already captured (by an earlier
// capture, or by its single-step create) 422 ORDER_ALREADY_CAPTURED ("Order already captured.
// If 'intent=CAPTURE' only one capture per order is allowed", Orders v2 errors).
func (s *Server) captureOrder(c *call) (*response, resourceRef) {
	id := c.r.PathValue("id")
	o, ok := s.orders[id]
	if !ok {
		return notFound("order", id), resourceRef{}
	}
	switch o.status {
	case "COMPLETED":
		return unprocessable("ORDER_ALREADY_CAPTURED", "Order already captured. If 'intent=CAPTURE' only one capture per order is allowed."), resourceRef{}
	case "CREATED", "PAYER_ACTION_REQUIRED":
		return unprocessable("ORDER_NOT_APPROVED", "Payer has not yet approved the Order for payment."), resourceRef{}
	case "VOIDED":
		return unprocessable("ORDER_ALREADY_VOIDED", "The order was voided."), resourceRef{}
	}
	s.captureLocked(o, testCards[o.vaultID], c.requestID, s.clock())
	return jsonResponse(http.StatusCreated, o.view(s)), resourceRef{"order", o.id}
}

// captureLocked captures the APPROVED order o with card (the zero testCard, a payment that
// succeeds, for an order the payer approved without a vaulted card): one capture, COMPLETED or
// DECLINED, recorded in Transaction Search when it completed (with the order's custom_id and
// invoice_id, as transaction_info's custom_field and invoice_id) and announced by webhook. The
// order becomes COMPLETED either way, as PayPal shows for card declines; a second capture is
// refused. requestID is the PayPal-Request-Id of the request that captured (the create's, for
// a single-step create). It is called with s.mu held.
func (s *Server) captureLocked(o *order, card testCard, requestID string, now time.Time) {
	cp := &capture{id: s.newIDLocked("CAPFAKE"), status: "COMPLETED", orderID: o.id, amount: o.amount,
		customID: o.customID, invoiceID: o.invoiceID, responseCode: "0000", requestID: requestID,
		created: now, updated: now}
	cp.refunded, _ = money.FromMinor(0, o.amount.Currency())
	event := "PAYMENT.CAPTURE.COMPLETED"
	if card.responseCode != "" {
		cp.status, cp.responseCode = "DECLINED", card.responseCode
		event = "PAYMENT.CAPTURE.DECLINED"
	}
	s.captures[cp.id] = cp
	o.captures = append(o.captures, cp)
	if cp.status == "COMPLETED" {
		s.recordTransactionLocked(cp.id, "", EventCodeCheckoutPayment, cp.amount, cp.customID, cp.invoiceID, now)
	}
	o.status, o.updated = "COMPLETED", now
	s.emitLocked(event, "capture", cp.id, cp.view())
}

// getCapture is GET /v2/payments/captures/{id}.
func (s *Server) getCapture(c *call) (*response, resourceRef) {
	cp, ok := s.captures[c.r.PathValue("id")]
	if !ok {
		return notFound("capture", c.r.PathValue("id")), resourceRef{}
	}
	return jsonResponse(http.StatusOK, cp.view()), resourceRef{}
}

// refundCapture is POST /v2/payments/captures/{id}/refund, bounded by what is left of the
// capture. Its body is optional and has no required field: without an amount, what is left of
// the capture is refunded (refund_request in
// https://github.com/paypal/paypal-rest-api-specifications/blob/main/openapi/payments_payment_v2.json;
// https://developer.paypal.com/docs/api/payments/v2/#captures_refund).
func (s *Server) refundCapture(c *call) (*response, resourceRef) {
	id := c.r.PathValue("id")
	cp, ok := s.captures[id]
	if !ok {
		return notFound("capture", id), resourceRef{}
	}
	var req struct {
		Amount      *amountJSON `json:"amount"`
		CustomID    string      `json:"custom_id"`
		InvoiceID   string      `json:"invoice_id"`
		NoteToPayer string      `json:"note_to_payer"`
	}
	if len(c.body) > 0 {
		if err := json.Unmarshal(c.body, &req); err != nil {
			return invalidRequest("", "MALFORMED_REQUEST_JSON", "The request JSON is not well formed: "+err.Error()), resourceRef{}
		}
	}
	switch {
	case len(req.CustomID) > maxCustomIDLen:
		return tooLong("/custom_id", maxCustomIDLen), resourceRef{}
	case len(req.InvoiceID) > maxInvoiceIDLen:
		return tooLong("/invoice_id", maxInvoiceIDLen), resourceRef{}
	case cp.status == "REFUNDED":
		return unprocessable("CAPTURE_FULLY_REFUNDED", "The capture has already been fully refunded."), resourceRef{}
	case cp.status != "COMPLETED" && cp.status != "PARTIALLY_REFUNDED":
		return unprocessable("REFUND_NOT_ALLOWED", fmt.Sprintf("A capture in status %s cannot be refunded.", cp.status)), resourceRef{}
	}
	left, _ := cp.amount.Sub(cp.refunded)
	amount := left
	if req.Amount != nil {
		if req.Amount.CurrencyCode != string(cp.amount.Currency()) {
			return unprocessable("REFUND_CAPTURE_CURRENCY_MISMATCH",
				fmt.Sprintf("Refund currency %q must match the capture's %s.", req.Amount.CurrencyCode, cp.amount.Currency())), resourceRef{}
		}
		var errResp *response
		if amount, errResp = parseAmount(req.Amount, "/amount"); errResp != nil {
			return errResp, resourceRef{}
		}
		if amount.Minor() > left.Minor() {
			return unprocessable("REFUND_AMOUNT_EXCEEDED",
				fmt.Sprintf("The refund amount %s must be less than or equal to the capture amount left to refund, %s.", amount, left)), resourceRef{}
		}
	}
	now := s.clock()
	re := &refund{id: s.newIDLocked("REFFAKE"), status: "COMPLETED", captureID: cp.id, orderID: cp.orderID,
		amount: amount, customID: req.CustomID, invoiceID: req.InvoiceID, noteToPayer: req.NoteToPayer,
		requestID: c.requestID, created: now, updated: now}
	s.refunds[re.id] = re
	s.refundList = append(s.refundList, re)
	cp.refunds = append(cp.refunds, re)
	s.recordTransactionLocked(re.id, cp.id, EventCodePaymentRefund, amount.Neg(), re.customID, re.invoiceID, now)
	cp.refunded, _ = cp.refunded.Add(amount)
	cp.updated = now
	if cp.refunded.Minor() == cp.amount.Minor() {
		cp.status = "REFUNDED"
	} else {
		cp.status = "PARTIALLY_REFUNDED"
	}
	s.emitLocked("PAYMENT.CAPTURE.REFUNDED", "refund", re.id, re.view())
	return jsonResponse(http.StatusCreated, re.view()), resourceRef{"refund", re.id}
}

// getRefund is GET /v2/payments/refunds/{id}.
func (s *Server) getRefund(c *call) (*response, resourceRef) {
	re, ok := s.refunds[c.r.PathValue("id")]
	if !ok {
		return notFound("refund", c.r.PathValue("id")), resourceRef{}
	}
	return jsonResponse(http.StatusOK, re.view()), resourceRef{}
}

// FailRefund makes the COMPLETED refund id fail later, as a refund PayPal could not return to
// the payer's funding source does: its status becomes FAILED and its amount is refundable
// again (the capture goes back to PARTIALLY_REFUNDED, or COMPLETED when nothing else is
// refunded), and its T1107 transaction in Transaction Search turns from status S to V
// (reversed: PayPal does not document what a failed refund shows there). No webhook event is
// emitted. It returns an error naming the problem when the
// refund is unknown or not COMPLETED.
func (s *Server) FailRefund(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	re, err := fakekit.InState("paypaltest", "refund", s.refunds, id, func(re *refund) string { return re.status }, "COMPLETED")
	if err != nil {
		return err
	}
	now := s.clock()
	re.status, re.updated = "FAILED", now
	if tx := s.transactionByID[re.id]; tx != nil {
		tx.status, tx.updated = TransactionReversed, now
	}
	cp := s.captures[re.captureID]
	cp.refunded, _ = cp.refunded.Sub(re.amount)
	cp.updated = now
	if cp.refunded.IsZero() {
		cp.status = "COMPLETED"
	} else {
		cp.status = "PARTIALLY_REFUNDED"
	}
	return nil
}

// CompletePayerAction simulates the payer completing the action an order in
// PAYER_ACTION_REQUIRED waits for (3-D Secure): the order becomes APPROVED and can be captured.
// It returns an error naming the problem when the order is unknown or not waiting.
func (s *Server) CompletePayerAction(orderID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.approveLocked(orderID, "PAYER_ACTION_REQUIRED")
}

// approveLocked makes the order orderID in status from APPROVED. Called with s.mu held.
func (s *Server) approveLocked(orderID, from string) error {
	o, err := fakekit.InState("paypaltest", "order", s.orders, orderID, func(o *order) string { return o.status }, from)
	if err != nil {
		return err
	}
	o.status, o.updated = "APPROVED", s.clock()
	return nil
}

// ApproveOrder simulates a payer approving an order created without a payment source (on
// PayPal's approval page): the order goes from CREATED to APPROVED and can then be captured by
// POST /v2/checkout/orders/{id}/capture, successfully ("APPROVED: The customer approved the
// payment through the PayPal wallet or another form of guest or unbranded payment",
// https://developer.paypal.com/api/orders/v2/definitions/order_status/). It returns an error
// naming the problem when the order is unknown or not CREATED.
func (s *Server) ApproveOrder(orderID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.approveLocked(orderID, "CREATED")
}
