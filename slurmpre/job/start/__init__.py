"""start"""
