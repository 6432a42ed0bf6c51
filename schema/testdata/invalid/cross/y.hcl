variable "port" {              # ERROR: Duplicate variable
  default = 9090
}

service "y" {
  command = ["y"]
  port    = var.port + 1
  depends_on "z" {}
}

service "z" {
  command = ["z"]
  depends_on "x" {}            # ERROR: Dependency cycle
}
