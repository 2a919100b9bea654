from bench.broker import main

main()
