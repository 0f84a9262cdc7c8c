"""handover"""
