from ddtctl.cli import main

main()
