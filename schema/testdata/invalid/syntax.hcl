service "broken" {
  command = ["x"
  port = 1 # ERROR: Missing item separator
}
