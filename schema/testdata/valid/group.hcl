# Trac and its worker run side by side on the same node.
group "trac" {
  service "trac" {
    command = ["tracd", "--port", "8123", "/srv/trac"]
    port    = 8123
  }

  service "trac-worker" {
    command = ["trac-admin", "/srv/trac", "worker"]

    depends_on "trac" {}
  }
}
