# Variables and dependencies span files.
variable "port" {
  default = 8080
}

service "x" {
  command = ["x"]
  port    = var.port
  depends_on "y" {}
}
