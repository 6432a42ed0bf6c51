# A web service with every kind of check.
variable "web_port" {
  default     = 8080
  description = "Port the web server listens on."
}

service "web" {
  command = ["python3", "-m", "http.server", "${var.web_port}"]
  dir     = "/srv/web"
  env     = { GREETING = "hello", PORT = var.web_port }
  port    = var.web_port
  address = "127.0.0.1"
  tags    = ["v1", "http"]
  meta    = { team = "storefront" }
  version = "1.4.2"
  id      = "web-main"

  check "http" {
    http     = "http://127.0.0.1:${var.web_port}/"
    interval = "2s"
    timeout  = "1s"

    success_before_passing    = 1
    failures_before_critical  = 2
    deregister_critical_after = "10m"
  }

  check "tcp" {
    tcp = "127.0.0.1:${var.web_port}"
  }

  check "grpc" {
    grpc     = "127.0.0.1:9090/health"
    interval = "5s"
  }

  check "script" {
    args     = ["/usr/local/bin/check-web", "--quick"]
    interval = "30s"
    timeout  = "10s"
  }

  check "heartbeat" {
    ttl = "15s"
  }

  restart {
    policy        = "always"
    on_unhealthy  = false
    grace         = "20s"
    unhealthy_for = "5s"
    attempts      = 5
    window        = "10m"
    delay         = "2s"
    max_delay     = "30s"
    on_exhausted  = "fail"
  }

  stop {
    signal  = "INT"
    timeout = "30s"
    drain   = "5s"
  }
}
