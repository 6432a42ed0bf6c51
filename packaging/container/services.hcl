# The container example's services: mariposa (PID 1) runs both, registers
# them with the node's Consul agent, and restarts either when it exits.
service "web" {
  command = ["python3", "-m", "http.server", "8080", "--directory", "/srv/www"]
  port    = 8080

  depends_on "page-writer" {}

  check "http" {
    http     = "http://127.0.0.1:8080/"
    interval = "5s"
    timeout  = "2s"
  }

  restart {
    policy = "always"
    delay  = "1s"
  }

  stop {
    timeout = "10s"
  }
}

service "page-writer" {
  command = ["/bin/sh", "-c", "mkdir -p /srv/www; while :; do date > /srv/www/index.html; sleep 5; done"]

  restart {
    policy = "always"
  }
}
