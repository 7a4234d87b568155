"""Instruments that look inside MXNet: timing asynchronous work, the engine's threads
and queues, the KVStore's placement and traffic, a co-tenant that slows one device."""
