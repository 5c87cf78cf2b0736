"""MQTT shared subscriptions (`$share/GROUP/FILTER`) across the overlay: the group machine at its
home, the members at their brokers, their peer messages (docs/mqtt.md "Shared subscriptions").
"""
