"""The faults: the nemesis, over a backend that kills, pauses and restarts brokers and cuts their network through Toxiproxy."""
